"""The tiers' two waits (tests/support/eventually.py): a wait that fails says what was waited for, what it last
saw, and what the test's ``explain`` adds (the state a person needs to see why); a wait that holds returns
at once without asking for it."""

import pytest

from tests.support.eventually import eventually, until


def test_a_failed_wait_names_what_it_waited_for_its_last_answer_and_the_explanation() -> None:
    with pytest.raises(AssertionError) as failed:
        until("the standby holding the Lease", lambda: "", timeout=0, explain=lambda: "holder: op-1 (deleting)")
    assert str(failed.value) == "the standby holding the Lease: not within 0s (last: '')\nholder: op-1 (deleting)"
    with pytest.raises(AssertionError) as failed:
        eventually("job 7 requeued", lambda: "JobState=FAILED", lambda s: "Restarts=1" in s, timeout=0,
                   explain=lambda: "--- the job's output")  # fmt: skip
    assert str(failed.value) == "job 7 requeued: 'JobState=FAILED'\n--- the job's output"


def test_a_wait_that_holds_returns_the_answer_and_never_asks_for_an_explanation() -> None:
    def never() -> str:
        raise RuntimeError("explain called although the wait held")

    assert until("ready", lambda: "yes", timeout=0, explain=never) == "yes"
    assert eventually("ready", lambda: "ok", lambda s: s == "ok", timeout=0, explain=never) == "ok"
    with pytest.raises(AssertionError, match=r"^ready: not within 0s \(last: 0\)$"):
        until("ready", lambda: 0, timeout=0)
