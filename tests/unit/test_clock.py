"""The clock records are stamped with: the database's time, strictly increasing."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from django_workers import clock


@pytest.fixture(autouse=True)
def _restore_offset() -> Iterator[None]:
    before = clock.offset()
    yield
    clock.set_offset(before)


def near(a: object, b: object, within: float = 1.0) -> bool:
    return abs((a - b).total_seconds()) < within  # type: ignore[operator]


def test_the_offset_to_the_database_clock_is_applied() -> None:
    clock.set_offset(timedelta(seconds=120))
    assert near(clock.now(), timezone.now() + timedelta(seconds=120))
    clock.set_offset(timedelta(seconds=-120))
    # A step back is taken at once, not by repeating the old time plus a microsecond.
    assert near(clock.now(), timezone.now() - timedelta(seconds=120))


def test_times_strictly_increase() -> None:
    stamps = [clock.now() for _ in range(1000)]
    assert all(a < b for a, b in itertools.pairwise(stamps))


def test_a_series_is_what_calls_in_a_row_would_return() -> None:
    before = clock.now()
    series = clock.now_series(1000)
    after = clock.now()
    assert len(series) == 1000
    assert before < series[0]
    assert all(b - a == timedelta(microseconds=1) for a, b in itertools.pairwise(series))
    assert series[-1] < after
    assert clock.now_series(0) == []
