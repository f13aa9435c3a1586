"""Connections cut in the middle of a drain: every task completes, the workers serve on.

For ``SCALE.cut_seconds`` the connections of the workers are cut over and
over while the test keeps submitting tasks that write to the database
(``fault_work``: an insert and an update each): by ``pg_terminate_backend``
of every backend but the test's own, or by a proxy between the workers and
the server that resets both ends of every connection (the server may then
commit a statement whose answer never arrives). Each task may retry three
times, so an attempt the cut hit runs again; every task must end COMPLETED,
the invariants hold, and each worker then still runs a new task.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from django_workers import (
    System,
    TaskOptions,
    TaskStatus,
    TaskSubmission,
    submit_task,
    submit_tasks,
)
from django_workers.models import TaskRecord
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks
from tests.faults import FAULT_TEST, scale
from tests.faults.cluster import PrivateCluster
from tests.faults.database import ALIAS, FaultDatabase, wait_drained
from tests.faults.invariants import Figures, check_invariants
from tests.faults.proxy import TcpProxy
from tests.faults.workers import FaultWorkers
from tests.helpers import wait_for_status

pytestmark = FAULT_TEST

SCALE = scale.current()
WORKERS = 2
#: Seconds a task works between its two writes: long enough for a cut to land in it.
HOLD = 0.02


def submit_work(store: DatabaseWorkerStore, prefix: str, start: int, count: int) -> list[str]:
    subs = [
        TaskSubmission(
            key=f"{prefix}-{i:05}",
            task=tasks.fault_work,
            args=[HOLD],
            # Enough retries, backing off, that the last ones come after the cuts stop
            # (an attempt the cut hits fails; on a loaded machine one task may be hit often).
            options=TaskOptions(retries=8, retry_backoff=0.5),
            scope="global",
        )
        for i in range(start, start + count)
    ]
    return submit_tasks(subs, System(), store=store)


@pytest.fixture
def proxy(cluster: PrivateCluster) -> Iterator[TcpProxy]:
    relay = TcpProxy("127.0.0.1", cluster.port).start()
    yield relay
    relay.close()


@pytest.mark.parametrize("how", ["pg_terminate_backend", "proxy"])
def test_connections_cut_mid_drain_every_task_completes_and_the_workers_serve_on(
    request: pytest.FixtureRequest,
    cluster: PrivateCluster,
    faults_db: FaultDatabase,
    fault_workers: FaultWorkers,
    report_figures: Callable[[Figures], None],
    how: str,
) -> None:
    # The default lease: a storm of cuts must not cost a worker its lease.
    for setting in ("LEASE_TIMEOUT", "HEARTBEAT_INTERVAL"):
        fault_workers.settings.pop(setting)
    if how == "proxy":
        relay: TcpProxy = request.getfixturevalue("proxy")
        fault_workers.database_url = faults_db.worker_url(port=relay.port)
        cut = relay.cut
    else:
        cut = cluster.terminate_backends
    workers = [
        fault_workers.start("--queues", f"default,w{i}", "--concurrency", "4")
        for i in range(WORKERS)
    ]
    fault_workers.wait_registered(workers, ALIAS)
    store = faults_db.store()
    started = time.monotonic()
    ids = submit_work(store, "work", 0, 200)

    cuts: Counter[str] = Counter()
    done = threading.Event()
    rng = random.Random(7)

    def cut_in_a_loop() -> None:
        while not done.wait(rng.uniform(0.2, 0.8)):
            cuts["rounds"] += 1
            cuts["connections"] += cut()

    cutter = threading.Thread(target=cut_in_a_loop, name="faults-cutter", daemon=True)
    cutter.start()
    # Tasks keep coming while the cuts go on, so they always land in a drain. The
    # proxy's cuts are the same fault from the other side: half the time shows them.
    seconds = SCALE.cut_seconds / 2 if how == "proxy" else SCALE.cut_seconds
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        ids += submit_work(store, "work", len(ids), 10)
        threading.Event().wait(0.1)
    done.set()
    cutter.join(10.0)
    assert cuts["connections"] >= cuts["rounds"], f"the cuts hit too few connections: {cuts}"

    wait_drained(ALIAS, timeout=120.0, stall=15.0, broken=lambda: exited(workers))
    not_completed = TaskRecord.objects.using(ALIAS).exclude(status=TaskStatus.COMPLETED)
    failed = [
        f"{r.id} {r.status} after {r.attempts} attempts: "
        + "; ".join(error_text(e) for e in [*r.errors, r.error] if e)
        for r in not_completed[:10]
    ]
    assert not failed, (
        f"{not_completed.count()} of {len(ids)} tasks did not complete after the cuts "
        f"({cuts['rounds']} rounds, {cuts['connections']} connections cut); first:\n"
        + "\n".join(failed)
    )
    figures = check_invariants(ALIAS, killed={}, submitted=ids)

    # Each worker still claims and runs: one more task on a queue only it serves.
    assert exited(workers) is None
    extra = [
        submit_task(
            f"after-{i}", tasks.fault_work, System(), queue=f"w{i}", scope="global", store=store
        )
        for i in range(WORKERS)
    ]
    for task_id in extra:
        wait_for_status(store, task_id, TaskStatus.COMPLETED, timeout=10.0)

    figures.duration = time.monotonic() - started
    figures.extra = {"cut-rounds": cuts["rounds"], "connections-cut": cuts["connections"]}
    retried = TaskRecord.objects.using(ALIAS).filter(attempts__gt=1).count()
    figures.extra["tasks-retried"] = retried
    report_figures(figures)


def exited(workers: list) -> str | None:
    """Why the test cannot go on: a worker that exited, with its log's end."""
    for worker in workers:
        code = worker.popen.poll()
        if code is not None:
            tail = "\n".join(worker.log().splitlines()[-30:])
            return f"worker {worker.pid} exited with {code}:\n{tail}"
    return None


def error_text(error: dict | None) -> str:
    return f"{error['type']}: {error['message']}" if error else "-"
