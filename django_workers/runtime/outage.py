"""How a runtime lives through a database that goes away: it waits, and says so twice.

``DatabaseWatch`` is shared by every thread of a runtime. The first error that
means the database cannot be reached logs one WARNING; later ones are DEBUG;
the first success after them logs one INFO with how long it was away. Each
thread keeps a connection of its own, so right after an outage the threads
that were idle meet their dead connections one by one: those errors, within
``AFTERSHOCK`` seconds of the recovery, are DEBUG too. Nothing here exits: a
worker waits an outage out, however long.

``LeaseWitness`` decides which leases this runtime may declare expired. A
heartbeat older than the lease timeout proves a worker dead only if the
database was up all that time, and the sweeping worker knows that only for
the span over which its own heartbeats went through without a break. After
an outage every heartbeat in the cluster is stale at once; a sweep right
after it would take the runs of workers that are alive and about to
heartbeat. So a runtime sweeps by lease only once it has itself heartbeated,
unbroken, for a whole lease, and only the leases that were stale while it
watched.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)

Report = Callable[..., None]

#: Seconds after a recovery in which a failure is taken for a connection that died in
#: the outage (and is opened again), not for a new outage.
AFTERSHOCK = 5.0


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the database could not be reached (not that it refused the data)."""
    return isinstance(error, OperationalError | InterfaceError)


def backoff_delay(errors: int, cap: float) -> float:
    """Seconds to wait after ``errors`` failures in a row: doubling, capped, with jitter."""
    delay = min(0.1 * 2.0 ** min(errors, 16), cap)
    # Jitter, so that the workers of a cluster do not all reconnect at the same instant.
    return delay / 2 + random.uniform(0, delay / 2)


class DatabaseWatch:
    """Whether the database is reachable, as this runtime's threads find it."""

    def __init__(self, report: Report, on_lost: Callable[[], None] = lambda: None) -> None:
        self._report = report
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._quiet = False
        self._recovered = float("-inf")

    @property
    def down(self) -> bool:
        """True from the first failure to reach the database until a call succeeds."""
        return self._down_since is not None

    def failed(self, what: str, error: BaseException) -> None:
        """A call made for ``what`` failed with ``error``; log it once per outage."""
        now = time.monotonic()
        with self._lock:
            loud = self._down_since is None and now - self._recovered >= AFTERSHOCK
            if self._down_since is None:
                self._down_since = now
                self._quiet = not loud
        self._on_lost()
        if loud:
            self._report(
                logger.warning,
                "Database unavailable (%s: %s); retrying until it answers. Running tasks go "
                "on, and their ends are written once it is back",
                what,
                _one_line(error),
            )
        else:
            self._report(logger.debug, "Database still unreachable (%s: %s)", what, error)

    def reached(self) -> None:
        """A call succeeded; if the database had been away, log that it is back."""
        if self._down_since is None:  # the usual case: no lock to take
            return
        now = time.monotonic()
        with self._lock:
            since, self._down_since = self._down_since, None
            loud = since is not None and not self._quiet
            if loud:
                self._recovered = now
        if since is not None and loud:
            self._report(
                logger.info,
                "Database reachable again after %.1f s; resuming",
                now - since,
            )


class LeaseWitness:
    """The span of database time over which this runtime watched every lease."""

    def __init__(self, lease_timeout: float, max_gap: float) -> None:
        """``max_gap``: seconds between two heartbeats beyond which the watch is broken."""
        self._lease = timedelta(seconds=lease_timeout)
        self._gap = timedelta(seconds=max_gap)
        self._lock = threading.Lock()
        self._since: datetime | None = None
        self._last: datetime | None = None
        self._until: datetime | None = None

    def broken(self) -> None:
        """This runtime could not reach the database: its watch starts over."""
        with self._lock:
            self._since = None

    def renewed(self, now: datetime) -> None:
        """A heartbeat went through at ``now`` (the database's clock)."""
        with self._lock:
            if self._since is None or self._last is None or now - self._last > self._gap:
                self._since = now
            self._last = now
            if now - self._since >= self._lease:
                self._until = now

    def stale_before(self) -> datetime | None:
        """Leases whose heartbeat is older than this are expired; None: none can be told yet."""
        with self._lock:
            return None if self._until is None else self._until - self._lease


def _one_line(error: BaseException) -> Any:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
