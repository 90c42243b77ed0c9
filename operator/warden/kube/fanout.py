"""Many independent writes at the API server's pace: in slow-start batches with bounded concurrency.

A thousand pods to make, or ten thousand pod conditions to set, go as ReplicaSets make their pods:
in batches of 1, 2, 4, 8, ... calls, each batch run to its end before the next, never more than
``limit`` calls in flight (a big batch keeps ``limit`` in flight until it is done). A batch with a
failure ends the run: when the API server refuses one call (a quota, an admission webhook, the
server going away) it likely refuses the rest, and the caller, level-based, tries what is left at its
next look instead of sending a thousand calls bound to fail.

A batch is run by at most ``limit`` pool threads taking its calls in turn, never by one future per call:
a batch of 4,096 futures alone held 7 MiB at once (issue 33's ten thousand pods).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

T = TypeVar("T")


@dataclass
class Outcome(Generic[T]):
    results: list[T]  # of the calls that ran, in order; fewer than the calls when one failed
    error: Exception | None = None  # the first failure, which ended the run


def batches(total: int) -> list[int]:
    """Sizes of the slow-start batches for ``total`` calls: 1, 2, 4, ... (the last one what is left)."""
    sizes, size = [], 1
    while total > 0:
        sizes.append(min(size, total))
        total -= sizes[-1]
        size *= 2
    return sizes


class Fanout:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a fan-out needs at least one call in flight")
        self.limit = limit
        self._pool: ThreadPoolExecutor | None = None

    def run(self, calls: Sequence[Callable[[], T]]) -> Outcome[T]:
        """Run ``calls`` (see the module's words); a single call runs on the caller's thread."""
        out: Outcome[T] = Outcome(results=[])
        start = 0
        for size in batches(len(calls)):
            batch = calls[start : start + size]
            start += size
            if size == 1:
                try:
                    out.results.append(batch[0]())
                except Exception as e:  # told to the caller, who tries again at its next look
                    out.error = e
                    return out
                continue
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.limit, thread_name_prefix="kube-fanout")
            results, errors = self._batch(self._pool, batch)
            for i, result in enumerate(results):
                if i not in errors:
                    out.results.append(cast(T, result))
                elif out.error is None:
                    out.error = errors[i]
            if out.error is not None:
                return out
        return out

    def _batch(
        self, pool: ThreadPoolExecutor, batch: Sequence[Callable[[], T]]
    ) -> tuple[list[T | None], dict[int, Exception]]:
        """Every call of ``batch``, by ``limit`` threads at most: each call's result (None where it
        failed) and the failures by index."""
        results: list[T | None] = [None] * len(batch)
        errors: dict[int, Exception] = {}
        lock = threading.Lock()
        turns = iter(range(len(batch)))

        def take_turns() -> None:
            while True:
                with lock:
                    i = next(turns, None)
                if i is None:
                    return
                try:
                    results[i] = batch[i]()
                except Exception as e:  # the batch's other calls still run: see Fanout.run
                    errors[i] = e

        runners = [pool.submit(take_turns) for _ in range(min(self.limit, len(batch)))]
        for runner in runners:
            runner.result()
        return results, errors
