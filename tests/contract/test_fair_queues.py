"""Fair queues: owners take turns in every claim, on every store, and per_owner holds."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_workers import TaskStatus, clock
from django_workers.info import TaskInfo
from django_workers.lifecycle import run_end
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from tests.factories import NewTaskFactory

FAIR = {"QUEUES": {"shared": {"fair": True}, "capped": {"fair": True, "per_owner": 2}}}


@pytest.fixture(autouse=True)
def fair_settings() -> Iterator[None]:
    with override_settings(DJANGO_WORKERS=FAIR):
        yield


def queue_up(store: WorkerStore, owner: str | None, count: int, queue: str = "shared") -> None:
    """``count`` tasks of ``owner`` (None: global), each created after the one before."""
    start = clock.now()
    tasks = [
        NewTaskFactory(owner=owner, queue=queue, created_at=start + timedelta(microseconds=n))
        if owner
        else NewTaskFactory(
            global_scope=True, queue=queue, created_at=start + timedelta(microseconds=n)
        )
        for n in range(count)
    ]
    store.submit_many(tasks, None)


def owners_of(claimed: Sequence[TaskInfo]) -> Counter[str | None]:
    return Counter(info.owner for info in claimed)


def test_a_second_owner_is_not_held_back_by_the_first_owners_queue(tx_store: WorkerStore) -> None:
    queue_up(tx_store, "alice", 50)
    queue_up(tx_store, "bob", 1)
    first = tx_store.claim("w1", None, 2, clock.now())
    assert owners_of(first) == {"alice": 1, "bob": 1}


def test_owners_take_turns_then_priority_and_age_decide(tx_store: WorkerStore) -> None:
    queue_up(tx_store, "alice", 5)
    queue_up(tx_store, "bob", 2)
    queue_up(tx_store, None, 1)  # global tasks count as one owner
    claimed = tx_store.claim("w1", None, 6, clock.now())
    assert owners_of(claimed) == {"alice": 3, "bob": 2, None: 1}
    # Within an owner, claim order: the oldest first.
    alice = [info for info in claimed if info.owner == "alice"]
    assert alice == sorted(alice, key=lambda info: info.created_at)


def test_what_an_owner_runs_already_counts_in_the_next_claim(tx_store: WorkerStore) -> None:
    queue_up(tx_store, "alice", 10)
    tx_store.claim("w1", None, 3, clock.now())  # alice's alone: three running
    queue_up(tx_store, "bob", 5)
    claimed = tx_store.claim("w2", None, 3, clock.now())
    assert owners_of(claimed) == {"bob": 3}
    claimed = tx_store.claim("w2", None, 2, clock.now())
    assert owners_of(claimed) == {"alice": 1, "bob": 1}


def test_per_owner_caps_what_an_owner_runs_at_once(tx_store: WorkerStore) -> None:
    queue_up(tx_store, "alice", 5, "capped")
    queue_up(tx_store, "bob", 5, "capped")
    claimed = tx_store.claim("w1", None, 10, clock.now())
    assert owners_of(claimed) == {"alice": 2, "bob": 2}
    assert tx_store.claim("w2", ["capped"], 10, clock.now()) == []
    done = [info for info in claimed if info.owner == "alice"][:1]
    won, refill = tx_store.end_and_claim(
        [run_end(info, "w1", TaskStatus.COMPLETED, clock.now()) for info in done],
        "w1",
        None,
        10,
        clock.now(),
    )
    assert won == [True]
    assert owners_of(refill) == {"alice": 1}


def test_other_queues_keep_their_claim_order_beside_a_fair_one(tx_store: WorkerStore) -> None:
    queue_up(tx_store, "alice", 3, "plain")
    queue_up(tx_store, "alice", 3)
    queue_up(tx_store, "bob", 1)
    claimed = tx_store.claim("w1", None, 7, clock.now())
    assert Counter(info.queue for info in claimed) == {"plain": 3, "shared": 4}
    assert tx_store.claim("w1", ["plain"], 5, clock.now()) == []


def test_a_deferred_task_waits_its_turn_out(tx_store: WorkerStore) -> None:
    later = clock.now() + timedelta(hours=1)
    tx_store.submit_many([NewTaskFactory(owner="bob", queue="shared", run_after=later)], None)
    queue_up(tx_store, "alice", 3)
    claimed = tx_store.claim("w1", None, 5, clock.now())
    assert owners_of(claimed) == {"alice": 3}


def test_a_claim_is_filled_by_the_owners_that_have_more(tx_store: WorkerStore) -> None:
    """An owner with fewer ready tasks than a fair share does not leave the claim short."""
    later = clock.now() + timedelta(hours=1)
    deferred = [NewTaskFactory(owner="carol", queue="shared", run_after=later) for _ in range(5)]
    tx_store.submit_many(deferred, None)
    queue_up(tx_store, "alice", 1)
    queue_up(tx_store, None, 2)
    queue_up(tx_store, "bob", 20)
    claimed = tx_store.claim("w1", None, 10, clock.now())
    assert owners_of(claimed) == {"alice": 1, None: 2, "bob": 7}


def test_turns_count_running_tasks_unevenly(tx_store: WorkerStore) -> None:
    queue_up(tx_store, "alice", 4)
    tx_store.claim("w1", None, 4, clock.now())  # alice runs four
    queue_up(tx_store, "bob", 10)
    queue_up(tx_store, "carol", 10)
    queue_up(tx_store, "alice", 10)
    claimed = tx_store.claim("w2", None, 11, clock.now())
    # Alice's next task has turn 5, as bob's and carol's fifth; at a tie, claim order.
    assert owners_of(claimed) == {"bob": 5, "carol": 5, "alice": 1}


@pytest.mark.django_db(transaction=True)
def test_racing_claimers_of_a_fair_queue_keep_per_owner() -> None:
    """Six threads, each with its own connection, claim the capped queue at once."""
    store = DatabaseWorkerStore()
    for owner in ("alice", "bob", "carol"):
        queue_up(store, owner, 10, "capped")
    start = threading.Barrier(6)
    claimed: list[list[TaskInfo]] = [[] for _ in range(6)]
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            start.wait(10)
            claimed[n] = store.claim(f"w{n}", None, 3, clock.now())
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    everyone = [info for found in claimed for info in found]
    assert owners_of(everyone) == {"alice": 2, "bob": 2, "carol": 2}
    connection.close()


@pytest.mark.django_db
def test_a_fair_claim_on_postgresql_is_one_statement() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's claim function")
    store = DatabaseWorkerStore()
    queue_up(store, "alice", 3)
    queue_up(store, "bob", 1)
    with CaptureQueriesContext(connection) as sent:
        claimed = store.claim("w1", None, 2, clock.now())
    assert owners_of(claimed) == {"alice": 1, "bob": 1}
    assert [q["sql"].count("django_workers_claim_fair") for q in sent] == [1]
