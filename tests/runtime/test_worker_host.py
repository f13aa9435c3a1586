"""A worker registers and serves whatever its host's name holds."""

from __future__ import annotations

import socket

import pytest

from django_workers import System, TaskStatus, clock, submit_task
from django_workers.bounds import HOST_MAX_LENGTH, WORKER_ID_MAX_LENGTH
from django_workers.stores import WorkerStore
from django_workers.stores.base import WorkerRegistration
from django_workers.stores.database import DatabaseWorkerStore
from tests.helpers import start_runtime, wait_for_status, wait_until

#: Bytes that are not UTF-8 decode to lone surrogates; a NUL; longer than any column.
HOSTILE_HOST = "h\udcff\x00" + "x" * 400


def test_a_worker_on_a_host_with_a_hostile_name_registers_and_serves(
    tx_store: WorkerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: HOSTILE_HOST)
    served = start_runtime(tx_store)
    try:
        task_id = submit_task(
            "t", "tests.tasks.add", System(), args=[1, 2], scope="global", store=tx_store
        )
        assert wait_for_status(tx_store, task_id, TaskStatus.COMPLETED).result == 3
        [worker] = wait_until(tx_store.list_workers)
        assert worker.id == served.runtime.worker_id
        assert len(worker.id) <= WORKER_ID_MAX_LENGTH
        assert worker.host.startswith("h\\udcff\\x00xxx")
        assert len(worker.host) <= HOST_MAX_LENGTH
    finally:
        served.stop()


@pytest.mark.django_db
def test_the_database_store_cuts_a_host_to_its_column() -> None:
    store = DatabaseWorkerStore()
    now = clock.now()
    store.register_worker(
        WorkerRegistration(
            id="w",
            host=HOSTILE_HOST,
            pid=1,
            queues=(),
            concurrency=1,
            started_at=now,
            heartbeat_at=now,
        )
    )
    [worker] = store.list_workers()
    assert len(worker.host) == HOST_MAX_LENGTH
    assert worker.host.endswith("[...]")
