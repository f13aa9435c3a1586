"""How a runtime logs an outage, and which leases it may declare expired after one."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import DataError, InterfaceError, OperationalError

from django_workers.runtime import outage
from django_workers.runtime.outage import DatabaseWatch, LeaseWitness, backoff_delay, unreachable
from django_workers.runtime.supervisor import RESTART_DELAY_MAX, restart_delay

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Lines:
    """A report callable that logs at once, as the runtime's reporter does later."""

    def __call__(self, log: Any, *args: Any) -> None:
        log(*args)


@pytest.fixture
def watch(caplog: pytest.LogCaptureFixture) -> DatabaseWatch:
    caplog.set_level(logging.DEBUG, logger="django_workers")
    return DatabaseWatch(Lines())


def levels(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage().split(" (")[0].split(" after")[0]) for r in caplog.records]


def test_an_outage_is_one_warning_while_it_lasts_and_one_line_when_it_ends(
    watch: DatabaseWatch, caplog: pytest.LogCaptureFixture
) -> None:
    watch.reached()  # no outage: nothing to say
    for what in ("claim", "housekeeping", "claim"):
        watch.failed(what, OperationalError("connection refused\nmore detail"))
    assert watch.down
    watch.reached()
    watch.reached()
    assert not watch.down
    assert levels(caplog) == [
        ("WARNING", "Database unavailable"),
        ("DEBUG", "Database still unreachable"),
        ("DEBUG", "Database still unreachable"),
        ("INFO", "Database reachable again"),
    ]
    assert "claim: connection refused)" in caplog.records[0].getMessage()  # its first line


def test_dead_connections_met_right_after_an_outage_are_no_second_outage(
    watch: DatabaseWatch, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    watch.failed("claim", OperationalError("refused"))
    now[0] += 20
    watch.reached()
    now[0] += 1  # an idle thread's connection from before the outage
    watch.failed("claim", OperationalError("terminating connection"))
    watch.reached()
    now[0] += outage.AFTERSHOCK + 1  # a new outage
    watch.failed("heartbeat", OperationalError("refused"))
    assert [level for level, _ in levels(caplog)] == ["WARNING", "INFO", "DEBUG", "WARNING"]


def test_only_errors_of_reaching_the_database_count_as_an_outage() -> None:
    assert unreachable(OperationalError("refused"))
    assert unreachable(InterfaceError("connection already closed"))
    assert not unreachable(DataError("value too long"))


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    for errors, full in [(1, 0.2), (2, 0.4), (3, 0.8), (10, 5.0), (10**6, 5.0)]:
        delays = [backoff_delay(errors, cap=5.0) for _ in range(50)]
        assert all(full / 2 <= d <= full for d in delays), (errors, delays)


def test_a_supervisor_restarts_quick_deaths_later_each_time_up_to_a_cap() -> None:
    assert all(0.5 <= restart_delay(1) <= 1.0 for _ in range(20))
    assert all(4.0 <= restart_delay(4) <= 8.0 for _ in range(20))
    assert all(restart_delay(50) <= RESTART_DELAY_MAX for _ in range(20))


# -- the lease witness ------------------------------------------------------------------------


def test_no_lease_is_expired_until_this_worker_watched_a_whole_lease() -> None:
    witness = LeaseWitness(lease_timeout=30.0, max_gap=15.5)
    for second in range(0, 30, 5):
        witness.renewed(at(second))
        assert witness.stale_before() is None
    witness.renewed(at(30))
    assert witness.stale_before() == at(0)
    witness.renewed(at(35))
    assert witness.stale_before() == at(5)


def test_an_outage_starts_the_watch_over_and_keeps_what_was_seen_before_it() -> None:
    witness = LeaseWitness(lease_timeout=30.0, max_gap=15.5)
    for second in range(0, 65, 5):
        witness.renewed(at(second))
    assert witness.stale_before() == at(30)
    witness.broken()  # the database went away at 62 s, for a minute
    witness.renewed(at(125))
    # Heartbeats older than 30 s were stale while it watched; the later ones may be of
    # workers that are alive and about to heartbeat again.
    assert witness.stale_before() == at(30)
    for second in range(130, 160, 5):
        witness.renewed(at(second))
    assert witness.stale_before() == at(125)


def test_a_gap_between_heartbeats_breaks_the_watch_too() -> None:
    witness = LeaseWitness(lease_timeout=30.0, max_gap=15.5)
    witness.renewed(at(0))
    witness.renewed(at(20))  # a process paused for 20 s saw nothing meanwhile
    for second in range(25, 50, 5):
        witness.renewed(at(second))
        assert witness.stale_before() is None
    witness.renewed(at(50))
    assert witness.stale_before() == at(20)
