"""The fault suite's own machinery: the private cluster, the proxy and the invariant checker.

Each fault test's verdict is only as good as these; here each is made to do
its job, and the checker is shown the violations it exists to catch.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta

import psycopg
import pytest
from django.utils import timezone

from django_workers import System, TaskStatus, TaskSubmission, submit_tasks
from django_workers.models import TaskRecord, WorkflowRecord
from django_workers.workflows import Workflow
from tests import tasks
from tests.faults import FAULT_TEST
from tests.faults.cluster import PrivateCluster, _children
from tests.faults.database import ALIAS, FaultDatabase, wait_drained
from tests.faults.invariants import WORKER_LOST, check_invariants
from tests.faults.proxy import TcpProxy
from tests.helpers import end_record, start_runtime, wait_until
from tests.models import Execution

pytestmark = FAULT_TEST


# -- the private cluster ----------------------------------------------------------------------


def test_the_private_cluster_stops_fast_crashes_and_starts_again_on_its_port(
    cluster: PrivateCluster, faults_db: FaultDatabase
) -> None:
    with cluster.connect(faults_db.name) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (1)")
    port = cluster.port
    cluster.stop("fast")
    assert not cluster.running
    with pytest.raises(psycopg.OperationalError, match="refused"):
        cluster.connect(faults_db.name)
    cluster.start()
    with cluster.connect(faults_db.name) as conn:
        conn.execute("INSERT INTO kept VALUES (2)")
    cluster.stop("immediate")  # a crash: committed rows survive it all the same
    assert not cluster.running
    cluster.start()
    with cluster.connect(faults_db.name) as conn:
        assert conn.execute("SELECT n FROM kept ORDER BY n").fetchall() == [(1,), (2,)]
    assert cluster.port == port


def test_killing_the_private_cluster_leaves_no_server_process(cluster: PrivateCluster) -> None:
    assert cluster.process is not None
    postmaster = cluster.process.pid
    backends = _children(postmaster)
    assert backends, "a running postmaster has its background processes"
    with cluster.connect():  # and a client backend
        pass
    cluster.kill()
    wait_until(lambda: not any(_alive(pid) for pid in [postmaster, *backends]), timeout=10.0)
    with pytest.raises(psycopg.OperationalError, match="refused"):
        cluster.connect()
    cluster.start()  # crash recovery, then it serves again
    with cluster.connect() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child stays a zombie until it is reaped, which is as good as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- the proxy --------------------------------------------------------------------------------


def _connect(port: int, timeout: int = 5) -> psycopg.Connection:
    return psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", autocommit=True, connect_timeout=timeout
    )


def test_the_proxy_relays_cuts_refuses_and_blackholes(cluster: PrivateCluster) -> None:
    proxy = TcpProxy("127.0.0.1", cluster.port).start()
    try:
        conn = _connect(proxy.port)
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert proxy.cut() == 1
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        conn.close()

        with proxy.refusing():
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError, match="refused"):
                _connect(proxy.port)
            assert time.monotonic() - started < 5.0
        with _connect(proxy.port) as conn:
            assert conn.execute("SELECT 2").fetchone() == (2,)

        kept = _connect(proxy.port)
        answered = threading.Event()

        def query() -> None:
            kept.execute("SELECT 3")
            answered.set()

        with proxy.blackholing():
            with pytest.raises(psycopg.OperationalError, match="timeout"):
                _connect(proxy.port, timeout=1)
            waiting = threading.Thread(target=query, daemon=True)
            waiting.start()
            assert not answered.wait(1.0), "a query went through the blackhole"
        assert answered.wait(10.0), "the query never went on once the blackhole ended"
        waiting.join(5.0)
        kept.close()
    finally:
        proxy.close()


# -- the invariant checker --------------------------------------------------------------------


def _submit(faults_db: FaultDatabase, *keys: str) -> list[str]:
    subs = [TaskSubmission(key=k, task=tasks.noop, scope="global") for k in keys]
    return submit_tasks(subs, System(), store=faults_db.store())


def _execution(task_id: str, pid: int, start: float, end: float | None, base: datetime) -> None:
    info = TaskRecord.objects.using(ALIAS).get(pk=task_id)
    Execution.objects.using(ALIAS).create(
        task_id=task_id,
        run_id=info.run_id,
        attempt=1,
        pid=pid,
        started_at=base + timedelta(seconds=start),
        finished_at=None if end is None else base + timedelta(seconds=end),
    )


def test_the_checker_passes_a_clean_run_and_counts_a_killed_workers_re_execution(
    faults_db: FaultDatabase,
) -> None:
    store = faults_db.store()
    once, twice = _submit(faults_db, "once", "twice")
    for task_id in (once, twice):
        end_record(store, task_id)
    base = timezone.now() - timedelta(minutes=1)
    _execution(once, 100, 0, 1, base)
    _execution(twice, 101, 0, None, base)  # killed mid-run: no end written
    _execution(twice, 102, 3, 4, base)
    figures = check_invariants(
        ALIAS, killed={101: base + timedelta(seconds=2)}, submitted=[once, twice]
    )
    assert (figures.tasks, figures.executions, figures.kills) == (2, 3, 1)
    assert (figures.reexecutions, figures.overlaps, figures.lost) == (1, 0, 0)


def test_the_checker_lists_each_violation_with_the_offending_ids(faults_db: FaultDatabase) -> None:
    store = faults_db.store()
    pending, overlapped, rerun = _submit(faults_db, "pending", "overlapped", "rerun")
    for task_id in (overlapped, rerun):
        end_record(store, task_id)
    base = timezone.now() - timedelta(minutes=1)
    _execution(overlapped, 200, 0, 2, base)
    _execution(overlapped, 201, 1, 3, base)
    _execution(rerun, 300, 0, 1, base)
    _execution(rerun, 301, 2, 3, base)
    with pytest.raises(AssertionError) as failed:
        check_invariants(ALIAS, killed={}, submitted=[pending, overlapped, rerun, "missing"])
    message = str(failed.value)
    assert "- record not ended (1): pending (PENDING)" in message
    assert "- submitted but no record (lost) (1): missing" in message
    assert "- overlapping executions (1): overlapped (pid 200" in message
    assert "- run again though the process that ran it was not killed (2): overlapped" in message
    assert "rerun (pid 300" in message


def test_the_checker_rejects_a_workflow_whose_end_disagrees_with_its_nodes(
    faults_db: FaultDatabase,
) -> None:
    store = faults_db.store()
    wf = Workflow("absorbed", System())
    first = wf.add("first", tasks.noop)
    failing = wf.add("failing", tasks.fail).after(first)
    wf.add("always", tasks.noop).after(failing).always()
    wf.submit(store=store)
    runtime = start_runtime(store)
    try:
        wait_drained(ALIAS, timeout=30.0)
    finally:
        runtime.stop()
    assert WorkflowRecord.objects.using(ALIAS).get().state == "completed"
    check_invariants(ALIAS, killed={})  # the failure was absorbed: a completed workflow

    WorkflowRecord.objects.using(ALIAS).update(state="failed")
    TaskRecord.objects.using(ALIAS).filter(pk="absorbed:always").update(status="CANCELLED")
    with pytest.raises(AssertionError) as failed:
        check_invariants(ALIAS, killed={})
    message = str(failed.value)
    assert "- workflow node disagrees with its record (1): absorbed:always" in message
    assert "- workflow ended in a state its nodes do not call for (1): absorbed (failed;" in message


def test_the_checker_allows_a_lost_claim_after_a_crash_only_and_no_worker_lost_without_a_kill(
    faults_db: FaultDatabase,
) -> None:
    store = faults_db.store()
    claimed_twice, recovered = _submit(faults_db, "claimed-twice", "recovered")
    end_record(store, claimed_twice)
    lost = {"type": WORKER_LOST, "message": "Worker lost"}
    end_record(store, recovered, TaskStatus.FAILED, error=lost)
    base = timezone.now() - timedelta(minutes=1)
    # The same run and attempt twice, in two live processes: what a lost claim looks like.
    _execution(claimed_twice, 400, 0, 1, base)
    _execution(claimed_twice, 401, 2, 3, base)
    with pytest.raises(AssertionError) as failed:
        check_invariants(ALIAS, killed={})
    message = str(failed.value)
    assert "run again though the process that ran it was not killed (1): claimed-twice" in message
    assert "no worker was killed (WorkerLost) (1): recovered" in message

    TaskRecord.objects.using(ALIAS).filter(pk=recovered).delete()
    figures = check_invariants(ALIAS, killed={}, server_crashed=True)
    assert (figures.lost_claims, figures.reexecutions) == (1, 0)
