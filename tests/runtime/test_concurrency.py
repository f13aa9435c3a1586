"""Races between real threads, lined up on a barrier, on every store and database.

Each thread uses its own database connection (Django's are per thread) and
closes it when done, so these run against committed data (``tx_store``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_workers import (
    Owner,
    System,
    TaskAlreadyFinished,
    TaskStatus,
    cancel_task,
    clock,
    get_task_status,
    lifecycle,
    submit_task,
)
from django_workers.stores import Submitted, WorkerStore
from tests.factories import NewTaskFactory
from tests.tasks import add

THREADS = 16


def run_together[T](count: int, fn: Callable[[int], T]) -> list[T]:
    """Run ``fn(0..count-1)`` on ``count`` threads released at once; re-raise any error."""
    barrier = threading.Barrier(count, timeout=30)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:
            errors.append(e)
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a racing thread hung"
    if errors:
        raise errors[0]
    return results


def test_one_key_submitted_at_once_creates_one_run(tx_store: WorkerStore) -> None:
    news = [NewTaskFactory(key="same", args=[i, i]) for i in range(THREADS)]
    done: list[Submitted] = run_together(THREADS, lambda i: tx_store.submit(news[i], "alice"))
    [created] = [d for d in done if d.created]
    assert {d.id for d in done} == {"alice::same"}
    assert {d.run_id for d in done} == {created.run_id}
    [only] = tx_store.list_tasks(user_id=None)
    winner = next(new for new in news if new.run_id == created.run_id)
    assert (only.run_id, only.args, only.watchers) == (created.run_id, winner.args, ("alice",))


def test_one_key_submitted_at_once_through_the_api(
    tx_store: WorkerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = threading.Lock()
    seen: list[Submitted] = []
    submit_many = tx_store.submit_many

    def recording(news: Any, caller: str | None) -> Sequence[Submitted]:
        done = submit_many(news, caller)
        with lock:
            seen.extend(done)
        return done

    monkeypatch.setattr(tx_store, "submit_many", recording)
    alice = Owner("alice")
    ids = run_together(
        THREADS, lambda i: submit_task("same", add, alice, args=[i, i], store=tx_store)
    )
    assert set(ids) == {"alice::same"}
    assert len(seen) == THREADS
    assert sum(d.created for d in seen) == 1
    assert len({d.run_id for d in seen}) == 1
    [only] = tx_store.list_tasks(user_id=None)
    assert only.run_id == seen[0].run_id


def _cancel_or_finish(store: WorkerStore, task_id: str) -> tuple[bool, bool]:
    """Race cancel_task against the terminal write of the running run; who won each side."""
    [running] = store.claim("w1", None, 1, timezone.now())
    assert running.id == task_id
    end = lifecycle.run_end(running, "w1", TaskStatus.COMPLETED, clock.now(), result=3)

    def cancel() -> bool:
        try:
            cancel_task(task_id, System(), store=store)
        except TaskAlreadyFinished:
            return False
        return True

    def finish() -> bool:
        # The worker's own read first, so neither side starts with a head start.
        store.get_task_info(task_id)
        [won] = store.end_tasks([end])
        return won

    cancelled, finished = run_together(2, lambda i: cancel() if i == 0 else finish())
    assert store.get_task_info(task_id).run_id == running.run_id  # type: ignore[union-attr]
    return cancelled, finished


def test_a_cancel_racing_a_terminal_write_has_one_winner(tx_store: WorkerStore) -> None:
    for round_ in range(20):
        task_id = submit_task(f"race-{round_}", add, System(), scope="global", store=tx_store)
        cancelled, finished = _cancel_or_finish(tx_store, task_id)
        assert cancelled != finished, f"round {round_}: both or neither won"
        info = get_task_status(task_id, System(), store=tx_store)
        expected = ("CANCELLED", None) if cancelled else ("COMPLETED", 3)
        assert (info.status, info.result) == expected
