"""Timestamps that order submissions: strictly increasing within a process."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from django.utils import timezone

_lock = threading.Lock()
_last: datetime | None = None
_TICK = timedelta(microseconds=1)


def now() -> datetime:
    """Return the current time, at least one microsecond after the previous call."""
    global _last
    current = timezone.now()
    with _lock:
        if _last is not None and current <= _last and current.tzinfo == _last.tzinfo:
            current = _last + _TICK
        _last = current
    return current
