"""A runtime whose LISTEN hears nothing warns once, polls, and says so; LISTEN_DATABASE.

The deaf listener is a fake connection (``tests.fake_listen``), so these run on
every database; the tests marked ``postgres_only`` use real LISTEN connections.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from django_workers import Owner, System, TaskStatus, notices, submit_task
from django_workers import handles as handles_module
from django_workers.management.commands.runworkers import _wake_up
from django_workers.notices import CHANNEL
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.stores.memory import InMemoryWorkerStore
from tests import tasks
from tests.fake_listen import FakeConnection
from tests.helpers import RuntimeThread, runtime_threads, start_runtime, wait_for_status, wait_until

on_postgres = pytest.mark.skipif(
    connections["default"].vendor != "postgresql", reason="LISTEN/NOTIFY needs PostgreSQL"
)

DEAF = "polling every 0.05 s (LISTEN receives no notices)"


@pytest.fixture(autouse=True)
def _short_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notices, "PROBE_TIMEOUT", 0.3)


@pytest.fixture
def served() -> Iterator[list[RuntimeThread]]:
    started: list[RuntimeThread] = []
    yield started
    tasks.reset_coordination()
    for runtime in started:
        if runtime.alive:
            runtime.stop()
    handles_module.close_listeners()
    # Every connection closed before pytest-django drops the test database.
    wait_until(lambda: not runtime_threads())


class DeafListening:
    """What a store behind a pooler in transaction mode does: LISTEN works, nothing arrives."""

    using = "default"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.opened: list[FakeConnection] = []
        self.probes: list[tuple[str, str]] = []

    def listen_params(self) -> dict[str, Any]:
        return {}

    def listen_alias(self) -> str:
        return "default"

    @contextlib.contextmanager
    def listening_connection(self) -> Iterator[FakeConnection]:
        self.opened.append(FakeConnection())
        yield self.opened[-1]

    def send_notice(self, channel: str, payload: str) -> None:
        self.probes.append((channel, payload))


class DeafMemoryStore(DeafListening, InMemoryWorkerStore):
    pass


class DeafDatabaseStore(DeafListening, DatabaseWorkerStore):
    pass


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_deaf_listen_warns_once_and_the_runtime_polls_at_its_interval(
    served: list[RuntimeThread], caplog: pytest.LogCaptureFixture
) -> None:
    store = DeafMemoryStore()
    served.append(start_runtime(store, poll_interval=0.05))
    runtime = served[0].runtime
    wait_until(lambda: warnings_of(caplog))
    wait_until(lambda: store.list_workers()[0].wake_up == DEAF)

    [warning] = warnings_of(caplog)
    assert "does not receive notices sent through alias 'default'" in warning
    assert "pool_mode = transaction" in warning
    assert "This worker polls every 0.05 s instead" in warning
    assert "DJANGO_WORKERS['LISTEN_DATABASE']" in warning
    assert not runtime.listening
    assert runtime._idle_wait() == 0.05  # not LISTEN's one-second safety net
    assert runtime.wake_up == DEAF
    [worker] = store.list_workers()
    assert worker.wake_up == DEAF
    # One LISTEN, taken back; no LISTEN again into the pool.
    [conn] = store.opened
    assert (conn.count("LISTEN"), conn.count("UNLISTEN")) == (1, 1)
    assert len(store.probes) == 1

    task_id = submit_task("polled", tasks.add, System(), args=[1, 2], scope="global", store=store)
    assert wait_for_status(store, task_id, TaskStatus.COMPLETED).result == 3
    assert len(warnings_of(caplog)) == 1


@pytest.mark.django_db(transaction=True)
def test_workers_status_and_the_banner_say_a_deaf_worker_polls(
    served: list[RuntimeThread],
) -> None:
    store = DeafDatabaseStore()
    served.append(start_runtime(store, poll_interval=0.05))
    runtime = served[0].runtime
    wait_until(lambda: store.list_workers()[0].wake_up == DEAF)

    out = io.StringIO()
    call_command("workers", "status", "--json", stdout=out)
    [worker] = json.loads(out.getvalue())["workers"]
    assert worker["wake_up"] == DEAF
    out = io.StringIO()
    call_command("workers", "status", stdout=out)
    assert DEAF in out.getvalue()
    assert _wake_up(store, 0.05, runtime) == DEAF


def test_a_listen_that_hears_its_probe_is_trusted_and_recorded(
    served: list[RuntimeThread],
) -> None:
    class Hearing(DeafMemoryStore):
        def send_notice(self, channel: str, payload: str) -> None:
            super().send_notice(channel, payload)
            self.opened[-1].deliver(channel, payload)

    store = Hearing()
    served.append(start_runtime(store, poll_interval=0.05))
    runtime = served[0].runtime
    wait_until(lambda: runtime.listening)
    assert runtime.wake_up == "LISTEN/NOTIFY"
    assert store.list_workers()[0].wake_up == "LISTEN/NOTIFY"


@pytest.mark.django_db
def test_false_means_no_listen_at_all() -> None:
    store = DatabaseWorkerStore()
    with override_settings(DJANGO_WORKERS={"LISTEN_DATABASE": False}):
        assert store.listen_alias() is None
        assert store.listen_params() is None
        if store.vendor == "postgresql":
            assert _wake_up(store, 0.5) == "polling every 0.5 s (LISTEN_DATABASE is False)"


# -- real LISTEN connections (PostgreSQL) --------------------------------------------------


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_unlisten_reaches_the_session_that_listened() -> None:
    params = DatabaseWorkerStore().listen_params()
    assert params is not None
    with psycopg.connect(**params, autocommit=True) as conn:
        session = notices.listen(conn, CHANNEL)
        assert conn.execute("SELECT pg_listening_channels()").fetchall() == [(CHANNEL,)]
        assert notices.unlisten(conn, CHANNEL, session)
        assert conn.execute("SELECT pg_listening_channels()").fetchall() == []


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_the_supervisors_banner_probes_listen_as_its_workers_will() -> None:
    class Silent(DatabaseWorkerStore):
        def send_notice(self, channel: str, payload: str) -> None:
            pass  # as through a pooler: the notice goes to another client

    assert _wake_up(DatabaseWorkerStore(), 0.5) == "LISTEN/NOTIFY"
    assert _wake_up(Silent(), 0.5) == "polling every 0.5 s (LISTEN receives no notices)"


@on_postgres
@pytest.mark.django_db(transaction=True, databases=["default", "listen"])
def test_with_a_listen_database_the_claim_on_notice_goes_through_the_main_alias(
    served: list[RuntimeThread],
) -> None:
    # LISTEN on the "listen" alias; a notice is claimed on the listener's thread, through
    # its connection of "default" (which does not LISTEN), not the listening one.
    seen: list[tuple[str, list[str], list[str]]] = []
    store = DatabaseWorkerStore()
    claim = store.claim

    def spied(*args: Any, **kwargs: Any) -> Any:
        found = claim(*args, **kwargs)
        if found:
            channels = []
            for alias in ("default", "listen"):
                with connections[alias].cursor() as cursor:
                    cursor.execute("SELECT pg_listening_channels()")
                    channels.append([row[0] for row in cursor.fetchall()])
            default_channels, listen_channels = channels
            seen.append((threading.current_thread().name, default_channels, listen_channels))
        return found

    store.claim = spied  # type: ignore[method-assign]
    with override_settings(DJANGO_WORKERS={"LISTEN_DATABASE": "listen"}):
        assert store.listen_alias() == "listen"
        served.append(start_runtime(store, poll_interval=60.0))
        runtime = served[0].runtime
        wait_until(lambda: runtime.listening)
        assert runtime.wake_up == "LISTEN/NOTIFY on alias 'listen'"
        for n in range(3):
            task_id = submit_task(f"wake-{n}", tasks.add, System(), args=[n, 1], scope="global")
            assert (
                wait_for_status(store, task_id, TaskStatus.COMPLETED, timeout=3.0).result == n + 1
            )
    assert ("workers-listener", [], [CHANNEL]) in seen


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_handles_whose_listen_is_deaf_warn_once_and_poll(
    served: list[RuntimeThread],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
) -> None:
    class Silent(DatabaseWorkerStore):
        def send_notice(self, channel: str, payload: str) -> None:
            pass  # as through a pooler: the notice goes to another client

    # Were LISTEN trusted, the wait would sleep out NOTIFY's safety poll of a minute.
    monkeypatch.setattr(handles_module, "NOTIFY_SAFETY_POLL", 60.0)
    handles_module.close_listeners()  # this test's store must make the process's listener
    store = Silent()
    served.append(start_runtime(DatabaseWorkerStore(), poll_interval=0.05))
    try:
        handle = handles_module.submit("k", tasks.held, Owner("alice"), args=[name], store=store)
        ends = handles_module._task_ends(store)
        assert ends is not None
        wait_until(lambda: ends._listener.deaf.is_set())
        assert not ends.listening
        results: list[Any] = []

        def wait() -> None:
            try:
                results.append(handle.result(timeout=10))
            finally:
                connections.close_all()

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_until(lambda: handle.id in ends._waiters)  # the wait has begun
        tasks.gate(name).set()
        waiter.join(15.0)
        assert results == ["released"]
    finally:
        tasks.reset_coordination()
    [warning] = [w for w in warnings_of(caplog) if "LISTEN" in w]
    assert "Handles waiting in this process poll instead (10 ms doubling to 0.5 s)" in warning
