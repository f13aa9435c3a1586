"""The server stopped, or crashed, in the middle of a drain, and started again.

Three workers serve the private cluster: two busy ones and one idle one (its
queue stays empty). In the middle of a drain the server is stopped
(``fast``) or crashed (``immediate``) for ``SCALE.outage_seconds``, which is
longer than the workers' lease (4 s in the suite; the full run takes 60 s
under the default 30 s). No worker may exit; each must log one WARNING when
the database goes away and one INFO when it is back, and no traceback; runs
that span the outage must never be taken from their live worker, and
functions that returned while the server was down must be recorded COMPLETED
once it is back, never ``WorkerLost``.

Also: ``submit_task`` while the server is down fails fast, with a database error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import DatabaseError
from django.utils import timezone

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
from tests.faults.workers import TASK_LOGGER, FaultWorkers, log_lines
from tests.helpers import WorkerSubprocess, wait_until
from tests.models import Execution

pytestmark = FAULT_TEST

SCALE = scale.current()
#: Errors a task's own ORM call may end with while the server is down.
DATABASE_ERRORS = {"django.db.utils.OperationalError", "django.db.utils.InterfaceError"}
#: Seconds between the start of the runs that straddle the outage and the stop.
LEAD = 2.0
#: Short tasks drained around the outage.
DRAIN = 250


def submit(store: DatabaseWorkerStore, prefix: str, count: int, **kwargs: object) -> list[str]:
    subs = [
        TaskSubmission(key=f"{prefix}-{i:04}", task=tasks.fault_work, scope="global", **kwargs)  # type: ignore[arg-type]
        for i in range(count)
    ]
    return submit_tasks(subs, System(), store=store)


def log_offset(worker: WorkerSubprocess) -> int:
    return worker.log_path.stat().st_size


def log_since(worker: WorkerSubprocess, offset: int) -> str:
    with worker.log_path.open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


#: The logger of the runtime's lines on the database going away and coming back.
OUTAGE_LOGGER = "django_workers.runtime.outage"


def outage_log_problems(worker: WorkerSubprocess, offset: int) -> list[str]:
    """What is wrong with a worker's log from the outage on: one WARNING, then one INFO."""
    text = log_since(worker, offset)
    own = [line for line in log_lines(text) if line.logger != TASK_LOGGER]
    problems = []
    if "Traceback" in text:
        problems.append("a traceback")
    warnings = [i for i, line in enumerate(own) if line.level == "WARNING"]
    errors = [line for line in own if line.level in ("ERROR", "CRITICAL")]
    if len(warnings) != 1:
        problems.append(f"{len(warnings)} WARNING lines instead of one")
    if errors:
        problems.append(f"{len(errors)} ERROR lines")
    # The INFO that the database is back; other INFO lines (the listener reconnecting) may
    # come in any order around it.
    after = own[warnings[0] + 1 :] if warnings else []
    infos = [line for line in after if line.level == "INFO" and line.logger == OUTAGE_LOGGER]
    if len(infos) != 1:
        problems.append(f"{len(infos)} INFO lines of {OUTAGE_LOGGER} after the WARNING, not one")
    elif not infos[0].message.startswith("Database reachable again"):
        problems.append(f"the INFO line says {infos[0].message!r}")
    if not problems:
        return []
    shown = "\n".join(f"    {line.level} {line.logger}: {line.message}" for line in own[:20])
    return [f"worker {worker.pid}: {', '.join(problems)}; its lines:\n{shown}"]


def error_type(error: dict | None) -> str | None:
    return error["type"] if error else None


def exited(workers: list[WorkerSubprocess]) -> str | None:
    dead = [w for w in workers if w.popen.poll() is not None]
    if not dead:
        return None
    return "\n".join(
        f"worker {w.pid} exited with {w.popen.returncode} during or after the outage; its log "
        f"ends:\n" + "\n".join(w.log().splitlines()[-15:])
        for w in dead
    )


@pytest.mark.timeout(SCALE.outage_seconds * 3 + 240)
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_server_outage_mid_drain_loses_nothing_and_no_worker_exits(
    cluster: PrivateCluster,
    faults_db: FaultDatabase,
    fault_workers: FaultWorkers,
    report_figures: Callable[[Figures], None],
    mode: str,
) -> None:
    outage = SCALE.outage_seconds
    if SCALE.outage_lease is None:
        for setting in ("LEASE_TIMEOUT", "HEARTBEAT_INTERVAL"):
            fault_workers.settings.pop(setting)
    else:
        lease, heartbeat = SCALE.outage_lease
        fault_workers.settings.update(LEASE_TIMEOUT=lease, HEARTBEAT_INTERVAL=heartbeat)
    busy = [
        fault_workers.start("--queues", f"default,w{i}", "--concurrency", "4") for i in range(2)
    ]
    idle = fault_workers.start("--queues", "idle", "--concurrency", "1")
    workers = [*busy, idle]
    fault_workers.wait_registered(workers, ALIAS)
    store = faults_db.store()
    began = time.monotonic()

    # Runs that straddle the outage (they return after it) and runs whose function
    # returns while the server is down; neither touches the database after its start.
    spanning = submit(store, "spanning", 2, args=[LEAD + outage + 3, False])
    during = submit(store, "during", 2, args=[LEAD + outage / 2, False])
    ledger = Execution.objects.using(ALIAS)
    wait_until(lambda: ledger.count() == 4, timeout=20.0)
    lead_until = time.monotonic() + LEAD
    drain = submit(store, "drain", DRAIN, args=[0.05], options=TaskOptions(retries=3))
    completed = TaskRecord.objects.using(ALIAS).filter(status=TaskStatus.COMPLETED)
    wait_until(lambda: completed.count() >= 20, timeout=20.0)  # the drain is under way
    threading.Event().wait(max(0.0, lead_until - time.monotonic()))

    offsets = {w.pid: log_offset(w) for w in workers}
    stopped_at = timezone.now()
    cluster.stop(mode)
    threading.Event().wait(outage)
    assert exited(workers) is None, exited(workers)
    cluster.start()
    restarted_at = timezone.now()
    faults_db.reconnect()

    wait_drained(ALIAS, timeout=outage + 120.0, stall=30.0, broken=lambda: exited(workers))
    assert exited(workers) is None, exited(workers)

    # The functions meant to return during the outage did (else the test proves nothing).
    for task_id in during:
        row = ledger.get(task_id=task_id)
        returned = row.started_at + timedelta(seconds=LEAD + outage / 2)
        assert stopped_at < returned < restarted_at, (
            f"{task_id} returned at {returned:%T.%f}, not during the outage "
            f"({stopped_at:%T.%f} to {restarted_at:%T.%f}); the test needs other timings"
        )
    outcomes = {
        r.id: (r.status, r.attempts, error_type(r.error), ledger.filter(task_id=r.id).count())
        for r in TaskRecord.objects.using(ALIAS).filter(pk__in=spanning + during)
    }
    assert outcomes == dict.fromkeys(spanning + during, (TaskStatus.COMPLETED, 1, None, 1)), (
        "runs that spanned the outage or returned during it must complete once, on their "
        f"own worker: (status, attempts, error, executions) = {outcomes}"
    )
    drained = TaskRecord.objects.using(ALIAS).filter(pk__in=drain)
    unexpected = [
        f"{r.id} {r.status} {error_type(r.error)}"
        for r in drained.exclude(status=TaskStatus.COMPLETED)
        if r.status != TaskStatus.FAILED or error_type(r.error) not in DATABASE_ERRORS
    ]
    assert not unexpected, f"drained tasks ended neither completed nor by a DB error: {unexpected}"
    resumed = drained.filter(status=TaskStatus.COMPLETED, finished_at__gt=restarted_at).count()
    assert resumed > 0, "no drained task completed after the restart: the drain did not resume"

    log_problems = [p for w in workers for p in outage_log_problems(w, offsets[w.pid])]
    assert not log_problems, "\n".join(log_problems)

    figures = check_invariants(
        ALIAS,
        killed={},
        submitted=spanning + during + drain,
        server_crashed=mode == "immediate",
    )
    figures.duration = time.monotonic() - began
    figures.extra = {
        "outage": f"{outage:g}s",
        "lease": f"{fault_workers.settings.get('LEASE_TIMEOUT', 30.0):g}s",
        "drain-failed": drained.filter(status=TaskStatus.FAILED).count(),
        "resumed-after-restart": resumed,
    }
    report_figures(figures)


def test_submit_task_while_the_server_is_down_fails_fast_with_a_database_error(
    cluster: PrivateCluster, faults_db: FaultDatabase, report_figures: Callable[[Figures], None]
) -> None:
    store = faults_db.store()
    submit_task("before", tasks.noop, System(), scope="global", store=store)
    cluster.stop("fast")
    try:
        outcome: dict[str, object] = {}

        def submit_now() -> None:
            try:
                submit_task("during", tasks.noop, System(), scope="global", store=store)
            except BaseException as e:
                outcome["error"] = e
            finally:
                faults_db.reconnect()  # this thread's connection

        started = time.monotonic()
        caller = threading.Thread(target=submit_now, daemon=True)
        caller.start()
        caller.join(15.0)
        took = time.monotonic() - started
        assert not caller.is_alive(), "submit_task still waiting 15 s after the server stopped"
        error = outcome.get("error")
        assert isinstance(error, DatabaseError), f"expected a DatabaseError, got {error!r}"
    finally:
        cluster.start()
    figures = Figures(duration=took)
    message = " ".join(str(error).split())
    figures.extra = {"error": f"{type(error).__module__}.{type(error).__qualname__}: {message}"}
    report_figures(figures)
