"""A dataplane cluster (warden_dev.dockercluster) as a pytest fixture's: the dataplane, GPU-jail and
conformance tiers bring theirs up and down through `running_for_tests`."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import pytest

from warden_dev.controlplane import sigterm_as_interrupt
from warden_dev.dockercluster import DockerCluster, DockerError, docker_available, missing_images
from warden_dev.podargs import TranslationError


@contextlib.contextmanager
def running_for_tests(c: DockerCluster, what: str, failed: Callable[[], bool]) -> Iterator[DockerCluster]:
    """A test fixture's cluster: up (or the test fails, saying why: no Docker, images missing, a start
    that failed), stopped afterwards whatever happened, also on SIGTERM; its containers' logs printed
    when ``failed()`` says the tests using it failed."""
    ok, why = docker_available()
    if not ok:
        pytest.fail(why, pytrace=False)
    missing = missing_images([*c.images, c.image("jail")])
    if missing:
        pytest.fail(f"images missing: {', '.join(missing)} (make images)", pytrace=False)
    try:
        with sigterm_as_interrupt():
            try:
                c.start(timeout=180)
            except (DockerError, TranslationError) as e:
                pytest.fail(f"{what} did not come up: {e}", pytrace=False)
            print(f"\n{what} {c.run_id} up in {c.startup_seconds:.1f}s (populate-jail {c.populate_seconds:.1f}s)",
                  file=sys.stderr)  # fmt: skip
            yield c
            if failed():
                print(f"\n{what}: tests failed; container logs:\n{c.diagnostics()}", file=sys.stderr)
    finally:
        c.stop()
