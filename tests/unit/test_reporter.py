"""The reporter thread: calls made in order, a failing one skipped, a stop ending its pause."""

from __future__ import annotations

import threading

import pytest

from django_workers.runtime.reporter import Reporter


def test_calls_queued_while_it_gathers_are_made_in_order_when_it_stops() -> None:
    # A gathering pause far longer than the test: only stop() can end it early.
    reporter = Reporter(gather=600.0)
    made: list[int] = []
    first_made = threading.Event()
    reporter.start()

    def make() -> None:
        made.append(1)
        first_made.set()

    reporter.report(make)
    assert first_made.wait(10.0), "the first call is made as soon as it is queued"
    for n in (2, 3, 4):
        reporter.report(made.append, n)
    ended = reporter.stop(wait=10.0)
    assert made == [1, 2, 3, 4]
    assert ended, "stop() ended the pause instead of waiting it out"


def test_a_failing_call_is_logged_and_the_next_ones_are_still_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reporter = Reporter(gather=0.0)
    made: list[str] = []
    reporter.start()
    reporter.report(lambda: 1 / 0)
    reporter.report(made.append, "after")
    reporter.stop(wait=10.0)
    assert made == ["after"]
    assert "Reporting failed; continuing" in caplog.text
