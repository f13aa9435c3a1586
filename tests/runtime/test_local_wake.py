"""SQLite's same-host wake-up: a submit or a promotion wakes an idle worker at once."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from django.db import connection

from django_workers import System, Workflow, local_wake, submit
from django_workers.runtime.wakeup import LocalListener
from django_workers.stores.database import DatabaseWorkerStore
from tests.helpers import start_runtime, wait_until
from tests.tasks import add

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="the wake-up socket is SQLite's"
)


def test_a_submit_and_a_promotion_wake_a_worker_polling_every_five_seconds(
    db_store: DatabaseWorkerStore,
) -> None:
    runtime = start_runtime(db_store, poll_interval=5.0)
    try:
        assert wait_until(lambda: runtime.runtime._local and runtime.runtime._local.ready.is_set())
        time.sleep(0.3)  # let the claim loop settle into its 5 s idle wait
        started = time.monotonic()
        handle = submit("woken", add, System(), args=[1, 2], scope="global", store=db_store)
        assert handle.wait(2.0).result == 3
        wf = Workflow("chain", System())
        first = wf.add("first", add, args=[1, 1])
        wf.add("second", add, args=[2, 2]).after(first)
        assert wf.submit(store=db_store).wait(2.0).state == "completed"
        assert time.monotonic() - started < 4.0
    finally:
        runtime.stop()
    # A runtime that stopped takes its socket with it.
    assert not list(local_wake.wake_dir(db_store.wake_file() or "").glob("*.sock"))


def test_without_a_listener_a_send_costs_nothing_and_a_dead_socket_is_removed(
    tmp_path: Path,
) -> None:
    database = tmp_path / "site.sqlite3"
    local_wake.send_enqueued(database, ["default"])  # no folder: nothing to do
    folder = local_wake.wake_dir(database)
    folder.mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(folder / "gone.sock"))
    dead.close()  # bound, then its process died without cleaning up
    heard: list[str] = []
    listener = LocalListener(str(database), "alive", heard.append)
    listener.start()
    try:
        local_wake.send_enqueued(database, ["default", "emails"])
        assert wait_until(lambda: len(heard) == 2)
        assert sorted(heard) == ["e:default", "e:emails"]
        assert not (folder / "gone.sock").exists()
    finally:
        listener.stop()
        listener.join(2.0)
    assert not (folder / "alive.sock").exists()


def test_a_runtime_binds_its_socket_exactly_where_the_banner_says_it_fits(
    tmp_path: Path,
) -> None:
    # Database file names whose socket paths end either side of the 107-byte limit.
    room = local_wake.MAX_PATH - len(str(tmp_path / "x.sqlite3.wake/0000000-00000000.sock"))
    seen = set()
    for extra in range(room - 2, room + 3):
        database = tmp_path / f"{'x' * (1 + extra)}.sqlite3"
        listener = LocalListener(str(database), local_wake.runtime_socket_name(), print)
        listener.start()
        try:
            assert listener.ready.is_set() == local_wake.socket_fits(database), extra
            seen.add(listener.ready.is_set())
        finally:
            listener.stop()
            listener.join(2.0)
    assert seen == {True, False}
