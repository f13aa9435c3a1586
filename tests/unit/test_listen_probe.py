"""A listener trusts LISTEN only once its own probe came back; else it stops and says so.

Behind a pooler in transaction mode LISTEN succeeds on whichever server session
ran it and the notices go to whatever client uses that session next: nothing
fails, nothing arrives. These tests drive ``Listener`` with fake connections.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from django_workers import notices
from django_workers.notices import CHANNEL, PROBE, RECONNECTED, Listener, parse_notice
from tests.fake_listen import FakeConnection
from tests.helpers import wait_until


class Harness:
    """A listener over fake connections, one per (re)connect; records what it did."""

    def __init__(self, *connections: FakeConnection, hears: list[bool]) -> None:
        self.connections = list(connections)
        self.opened: list[FakeConnection] = []
        self.hears = hears
        self.heard: list[str] = []
        self.deaf_calls = 0
        self.probes: list[tuple[str, str]] = []
        self.listener = Listener(
            {},
            self.heard.append,
            connect=self.connect,
            probe=self.probe,
            on_deaf=self.on_deaf,
        )

    @contextlib.contextmanager
    def connect(self) -> Iterator[FakeConnection]:
        conn = self.connections.pop(0)
        self.opened.append(conn)
        yield conn

    def probe(self, channel: str, payload: str) -> None:
        self.probes.append((channel, payload))
        if self.hears[len(self.opened) - 1]:
            self.opened[-1].deliver(channel, payload)

    def on_deaf(self) -> None:
        self.deaf_calls += 1

    def __enter__(self) -> Harness:
        self.listener.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.stop()
        self.listener.join(5.0)


@pytest.fixture(autouse=True)
def _short_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notices, "PROBE_TIMEOUT", 0.3)


def test_a_listen_that_hears_its_probe_is_trusted() -> None:
    conn = FakeConnection()
    with Harness(conn, hears=[True]) as run:
        assert run.listener.ready.wait(5.0)
        wait_until(lambda: run.heard)
        conn.deliver(CHANNEL, "e:reports")
        wait_until(lambda: "e:reports" in run.heard)
    [(channel, token)] = run.probes
    assert channel == CHANNEL
    assert parse_notice(token).kind == PROBE
    assert run.heard[0] == RECONNECTED.payload  # the probe itself is not passed on
    assert token not in run.heard
    assert run.listener.settled.is_set()
    assert not run.listener.deaf.is_set()
    assert (conn.count("LISTEN"), conn.count("UNLISTEN"), run.deaf_calls) == (1, 0, 0)


def test_a_listen_that_never_hears_its_probe_takes_it_back_and_stops_for_good() -> None:
    conn = FakeConnection(session=41)
    spare = FakeConnection()
    with Harness(conn, spare, hears=[False, True]) as run:
        assert run.listener.settled.wait(5.0)
        wait_until(lambda: run.deaf_calls)
        run.listener.join(5.0)
        assert not run.listener._thread.is_alive()
    assert run.listener.deaf.is_set()
    assert not run.listener.ready.is_set()
    assert run.deaf_calls == 1
    assert run.heard == []  # not even the reconnect notice: nobody may count on LISTEN
    # LISTEN once, then UNLISTEN on the session that ran it; never LISTEN again.
    assert conn.statements == [
        f"LISTEN {CHANNEL}",
        "SELECT pg_backend_pid()",
        f"UNLISTEN {CHANNEL}",
        "SELECT pg_backend_pid()",
    ]
    assert run.opened == [conn]


def test_unlisten_goes_on_until_it_reaches_the_session_that_listened() -> None:
    # Through a pooler each statement runs on a session the pooler hands out.
    sessions = iter([5, 6, 5, 9, 12])

    class Pooled(FakeConnection):
        def execute(self, statement: str) -> Any:
            self.statements.append(statement)
            if statement.startswith("SELECT"):
                session = next(sessions)
                return type("Result", (), {"fetchone": lambda self: (session,)})()
            return None

    conn = Pooled()
    assert notices.listen(conn, CHANNEL) == 5
    assert notices.unlisten(conn, CHANNEL, 9)
    assert conn.count("UNLISTEN") == 3


def test_a_reconnect_is_probed_again_and_a_deaf_one_stops_the_listener() -> None:
    first = FakeConnection(lost_after_probe=True)
    second = FakeConnection()
    with Harness(first, second, hears=[True, False]) as run:
        assert run.listener.ready.wait(5.0)
        wait_until(lambda: run.deaf_calls, timeout=10.0)
    assert len(run.probes) == 2
    assert run.opened == [first, second]
    assert (second.count("LISTEN"), second.count("UNLISTEN")) == (1, 1)
    assert run.listener.deaf.is_set()
    assert not run.listener.ready.is_set()


def test_a_probe_that_cannot_be_sent_is_a_lost_connection_not_a_deaf_one() -> None:
    class Failing(Harness):
        def probe(self, channel: str, payload: str) -> None:
            if len(self.opened) == 1:
                raise psycopg.OperationalError("the main alias is down (a test's)")
            super().probe(channel, payload)

    run = Failing(FakeConnection(), FakeConnection(), hears=[True, True])
    with run:
        assert run.listener.ready.wait(5.0)
    assert len(run.opened) == 2
    assert run.deaf_calls == 0
