"""The time every record is stamped with: the database's clock, strictly increasing.

Hosts' clocks drift apart; a lease compared across hosts must not. A runtime
measures how far this host's clock is from the database server's (at start
and on every heartbeat) and sets that offset here, so leases, heartbeats, the
zombie sweep, ``started_at``/``finished_at`` and ``run_after`` comparisons all
use the database's time. A process that never measured (a web process that
only submits) uses its own clock.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from django.utils import timezone

_lock = threading.Lock()
_last: datetime | None = None
_offset = timedelta(0)
_TICK = timedelta(microseconds=1)
_RESTART = timedelta(seconds=1)


def now() -> datetime:
    """Return the database's current time, at least one microsecond after the previous call."""
    return _reserve(1)


def now_series(count: int) -> list[datetime]:
    """Return ``count`` times as ``count`` calls of ``now()`` in a row could, one microsecond apart.

    For stamping a batch with one read of the clock: the series runs ahead of the
    clock by ``count`` microseconds at most, less than building that many records takes.
    """
    if count < 1:
        return []
    first = _reserve(count)
    series = [first]
    for _ in range(count - 1):
        first += _TICK
        series.append(first)
    return series


def _reserve(count: int) -> datetime:
    """The first of ``count`` times one microsecond apart, all after every earlier one."""
    global _last
    current = timezone.now()
    if _offset:  # zero in a process that never measured (no date arithmetic then)
        current += _offset
    with _lock:
        last = _last
        if last is not None and current <= last and current.tzinfo == last.tzinfo:
            current = last + _TICK
        _last = current if count == 1 else current + _TICK * (count - 1)
    return current


def set_offset(offset: timedelta) -> None:
    """Record how far the database's clock is ahead of this host's (negative: behind)."""
    global _offset, _last
    with _lock:
        if offset < _offset - _RESTART:
            # A big step back (the first measure on a skewed host): start the increasing
            # sequence afresh rather than repeat the old time plus a microsecond until then.
            _last = None
        _offset = offset


def offset() -> timedelta:
    """The offset last measured (zero until a runtime measured it)."""
    return _offset
