"""The line `.ci/run`'s summary gives a failed test (tests/support/failures.py): CI keeps little more than it,
so it must say why."""

from tests.support.failures import first_line


def test_an_assertion_whose_message_starts_on_a_new_line_keeps_that_line() -> None:
    message = "AssertionError: \nexit 255: Connection closed by 10.0.0.1 port 30022\n\nassert 255 == 0"
    assert first_line(message) == "AssertionError: exit 255: Connection closed by 10.0.0.1 port 30022"


def test_a_one_line_reason_stays_as_it_is_and_a_long_one_is_cut() -> None:
    assert first_line("AssertionError: the backup Job finished: ''\nassert ...") == (
        "AssertionError: the backup Job finished: ''"
    )
    cut = first_line("AssertionError: " + "x" * 1000)
    assert len(cut) == 400 and cut.endswith("…")
    assert first_line("") == ""
