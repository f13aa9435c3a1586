"""Each of three workers stopped with SIGTERM and started again, in turn, during a drain.

A stop drains the worker: its runs end on their own terms (the short tasks
here complete), runs it claimed but had not started go back to their queue,
and it exits 0. Across the three restarts no task is lost, none runs twice,
and no two executions of one task overlap.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django_workers import System, TaskStatus, TaskSubmission, submit_tasks
from django_workers.models import TaskRecord
from tests import tasks
from tests.faults import FAULT_TEST, scale
from tests.faults.database import ALIAS, FaultDatabase, live_counts, wait_drained
from tests.faults.invariants import Figures, check_invariants
from tests.faults.workers import FaultWorkers
from tests.helpers import wait_until

pytestmark = FAULT_TEST

SCALE = scale.current()
WORKERS = 3
#: Seconds each task works: short, yet the drain outlasts three restarts.
HOLD = 0.1


def test_rolling_sigterm_and_restart_of_each_worker_mid_drain_loses_and_repeats_nothing(
    faults_db: FaultDatabase,
    fault_workers: FaultWorkers,
    report_figures: Callable[[Figures], None],
) -> None:
    total = SCALE.rolling_tasks
    workers = [fault_workers.start("--concurrency", "4") for _ in range(WORKERS)]
    fault_workers.wait_registered(workers, ALIAS)
    began = time.monotonic()
    subs = [
        TaskSubmission(key=f"short-{i:05}", task=tasks.fault_work, args=[HOLD], scope="global")
        for i in range(total)
    ]
    ids = submit_tasks(subs, System(), store=faults_db.store())
    completed = TaskRecord.objects.using(ALIAS).filter(status=TaskStatus.COMPLETED)

    exits = []
    for turn, worker in enumerate(workers):
        # Stop one worker at 10 %, 30 % and 50 % of the drain.
        # mypy infers no lambda with a default argument.
        wait_until(
            lambda t=turn: completed.count() >= total * (0.1 + 0.2 * t),  # type: ignore[misc]
            timeout=120.0,
        )
        live, _ = live_counts(ALIAS)
        assert live > 0, f"the drain ended before stop {turn + 1}: submit more tasks"
        exits.append(fault_workers.terminate(worker, timeout=60.0))
        fault_workers.wait_registered([fault_workers.start("--concurrency", "4")], ALIAS)
    took = wait_drained(ALIAS, timeout=300.0, stall=30.0)

    assert exits == [0] * WORKERS, f"exit codes of the stopped workers: {exits}"
    assert completed.count() == total, f"not completed: {live_counts(ALIAS)}"
    figures = check_invariants(ALIAS, killed={}, submitted=ids)
    assert (figures.reexecutions, figures.retries) == (0, 0), figures.line()
    figures.duration = time.monotonic() - began
    figures.extra = {"restarts": WORKERS, "drain-after-last-restart": f"{took:.1f}s"}
    report_figures(figures)
