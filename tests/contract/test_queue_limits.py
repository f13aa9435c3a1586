"""Queue concurrency limits hold in every claim: alone, with a refill, and under a race."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from django.db import connection, connections

from django_workers import TaskStatus, clock
from django_workers.info import TaskInfo
from django_workers.lifecycle import run_end
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.stores.sql import claim as sql_claim
from tests.factories import NewTaskFactory

LIMITS = {"one": 1, "three": 3}


def queue_up(store: WorkerStore, counts: dict[str, int]) -> None:
    tasks = [
        NewTaskFactory(global_scope=True, queue=queue)
        for queue, count in counts.items()
        for _ in range(count)
    ]
    store.submit_many(tasks, None)


def queues_of(claimed: Sequence[TaskInfo]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for info in claimed:
        counts[info.queue] = counts.get(info.queue, 0) + 1
    return counts


def test_each_limited_queue_gets_at_most_its_limit(tx_store: WorkerStore) -> None:
    queue_up(tx_store, {"one": 4, "three": 4, "free": 4})
    claimed = tx_store.claim("w1", None, 20, clock.now(), LIMITS)
    assert queues_of(claimed) == {"one": 1, "three": 3, "free": 4}


def test_runs_of_other_workers_count_against_the_limit(tx_store: WorkerStore) -> None:
    queue_up(tx_store, {"three": 6})
    first = tx_store.claim("w1", None, 2, clock.now(), LIMITS)
    second = tx_store.claim("w2", ["three"], 10, clock.now(), LIMITS)
    assert (len(first), len(second)) == (2, 1)
    assert tx_store.claim("w3", None, 10, clock.now(), LIMITS) == []


def test_a_full_queue_leaves_the_others_claimable(tx_store: WorkerStore) -> None:
    queue_up(tx_store, {"one": 5})
    [running] = tx_store.claim("w1", None, 10, clock.now(), LIMITS)
    queue_up(tx_store, {"free": 2})
    claimed = tx_store.claim("w2", None, 2, clock.now(), LIMITS)
    assert queues_of(claimed) == {"free": 2}
    assert running.queue == "one"


def test_a_nearly_full_queue_gives_its_room_and_the_others_fill_the_claim(
    tx_store: WorkerStore,
) -> None:
    queue_up(tx_store, {"three": 5})
    assert len(tx_store.claim("w1", ["three"], 2, clock.now(), LIMITS)) == 2
    queue_up(tx_store, {"free": 3})  # behind the rest of "three" in claim order
    claimed = tx_store.claim("w2", None, 3, clock.now(), LIMITS)
    assert queues_of(claimed) == {"three": 1, "free": 2}


def test_a_large_limit_nearly_reached_gives_its_room_and_the_others_fill_the_claim(
    tx_store: WorkerStore,
) -> None:
    limits = {"big": 12}  # above the claims' size: only the runs make it cramped
    queue_up(tx_store, {"big": 15})
    assert len(tx_store.claim("w1", None, 10, clock.now(), limits)) == 10
    queue_up(tx_store, {"free": 3})
    claimed = tx_store.claim("w2", None, 5, clock.now(), limits)
    assert queues_of(claimed) == {"big": 2, "free": 3}


def test_a_full_queue_served_alone_gives_nothing(tx_store: WorkerStore) -> None:
    queue_up(tx_store, {"one": 3})
    assert len(tx_store.claim("w1", ["one"], 5, clock.now(), LIMITS)) == 1
    assert tx_store.claim("w2", ["one"], 5, clock.now(), LIMITS) == []
    assert tx_store.claim("w2", ["one", "free"], 5, clock.now(), LIMITS) == []


def test_a_refill_counts_the_runs_it_ends(tx_store: WorkerStore) -> None:
    queue_up(tx_store, {"three": 5, "one": 2})
    claimed = tx_store.claim("w1", None, 10, clock.now(), LIMITS)
    assert queues_of(claimed) == {"three": 3, "one": 1}
    done = [info for info in claimed if info.queue == "three"][:2]
    ends = [run_end(info, "w1", TaskStatus.COMPLETED, clock.now()) for info in done]
    won, refill = tx_store.end_and_claim(ends, "w1", None, 10, clock.now(), LIMITS)
    assert won == [True, True]
    assert queues_of(refill) == {"three": 2}


@pytest.mark.django_db(transaction=True)
def test_racing_claimers_never_exceed_a_limit() -> None:
    """Eight threads, each with its own connection, claim at once, round after round."""
    store = DatabaseWorkerStore()
    queue_up(store, {"three": 60, "one": 20})
    start = threading.Barrier(8)
    claimed: list[list[TaskInfo]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            start.wait(10)
            claimed[n] = store.claim(f"w{n}", None, 10, clock.now(), LIMITS)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            connections.close_all()

    for _round in range(4):
        threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors, (_round, errors)
        everyone = [info for found in claimed for info in found]
        assert queues_of(everyone) == {"three": 3, "one": 1}
        # End them all, so the next round races for the freed slots.
        for n, found in enumerate(claimed):
            ends = [run_end(info, f"w{n}", TaskStatus.COMPLETED, clock.now()) for info in found]
            assert store.end_tasks(ends) == [True] * len(found)
    connection.close()


@pytest.mark.django_db
def test_a_limited_claim_is_planned_without_jit() -> None:
    """Its window's sort, priced out by the claim-order setting, once cost 360 ms of JIT."""
    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL plan")
    text, params, leading = sql_claim._limited_claim_sql("w1", None, 10, clock.now(), LIMITS)
    *before, claim = text.split(";\n")
    assert len(before) == leading
    # The lock rows' INSERT and lock take the queue names; the settings take nothing.
    values_of = [[params[0]], [params[1]]] + [[]] * (len(before) - 2)
    with connection.cursor() as cursor:
        for statement, values in zip(before, values_of, strict=True):
            cursor.execute(statement, values)
        cursor.execute(f"EXPLAIN {claim}", params[2:])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan using workers_task_pending" in plan
    assert "JIT" not in plan
