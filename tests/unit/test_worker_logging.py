"""runworkers' own log lines: the same text as logging's default formatter gives."""

from __future__ import annotations

import logging

import pytest

from django_workers.runtime import process

FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("django_workers", logging.INFO, __file__, 1, "Task %s", ("t",), None)
    record.created = created
    record.msecs = (created - int(created)) * 1000
    return record


@pytest.mark.parametrize(
    "times",
    [
        [1_700_000_000.25, 1_700_000_000.75, 1_700_000_001.0, 1_700_000_000.5],
        [1_800_000_059.999, 1_800_000_060.001, 1_800_003_600.0],
    ],
)
def test_each_line_reads_as_the_default_formatter_writes_it(times: list[float]) -> None:
    ours, default = process._LineFormatter(FORMAT), logging.Formatter(FORMAT)
    for created in times:  # the cached second changes, and goes back
        assert ours.format(_record(created)) == default.format(_record(created))


def test_a_date_format_of_the_site_is_used_as_given() -> None:
    ours = process._LineFormatter(FORMAT, datefmt="%H:%M")
    record = _record(1_700_000_000.25)
    assert ours.formatTime(record, "%H:%M") == logging.Formatter().formatTime(record, "%H:%M")
