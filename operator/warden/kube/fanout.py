"""Many independent writes at the API server's pace: in slow-start batches with bounded concurrency.

A thousand pods to make, or ten thousand pod conditions to set, go as ReplicaSets make their pods:
in batches of 1, 2, 4, 8, ... calls, each batch run to its end before the next, never more than
``limit`` calls in flight (a big batch keeps ``limit`` in flight until it is done). A batch with a
failure ends the run: when the API server refuses one call (a quota, an admission webhook, the
server going away) it likely refuses the rest, and the caller, level-based, tries what is left at its
next look instead of sending a thousand calls bound to fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

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
            futures = [self._pool.submit(call) for call in batch]
            for future in futures:
                error = future.exception()
                if error is None:
                    out.results.append(future.result())
                elif out.error is None and isinstance(error, Exception):
                    out.error = error
            if out.error is not None:
                return out
        return out
