"""Chaos: a random worker killed with SIGKILL every 1-3 s, and started again, mid-drain.

Three workers drain plain tasks and ten-node workflows (with ``.always()``
nodes, undos, an undo that fails, and nodes that fail on purpose) while a
driver kills one of them at random every one to three seconds and starts
another in its place. At the end every record and workflow has ended, no
two executions of a task overlapped, a task ran again only after its
worker was killed, and every workflow ended as its nodes call for.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from django_workers import System, TaskOptions, TaskSubmission, submit_tasks
from django_workers.models import WorkflowRecord
from django_workers.workflows import Workflow
from tests import tasks
from tests.faults import FAULT_TEST, scale
from tests.faults.database import ALIAS, FaultDatabase, live_counts, wait_drained
from tests.faults.invariants import Figures, check_invariants
from tests.faults.workers import FaultWorkers

pytestmark = FAULT_TEST

SCALE = scale.current()
WORKERS = 3
#: A plain task works 0 to 0.15 s; a node 0.05 s.
HOLDS = (0.0, 0.05, 0.1, 0.15)
NODE_HOLD = 0.05
#: Nodes are claimed before the plain backlog, so workflows run through the chaos too.
NODE_PRIORITY = 5
#: Plain tasks and nodes may run again after a kill (retries left), or end WorkerLost.
RETRIES = TaskOptions(retries=2)


def chaos_workflow(n: int) -> Workflow:
    """Ten nodes; which one fails (if any) depends on ``n``, so every kind of end occurs.

    a -> b, c -> d -> e, f -> g (always) -> h -> i -> j (always); a, b, d and h have
    undos. ``n % 4``: 0 all complete; 1 f fails, absorbed by g (completed); 2 c fails,
    d, e and f are cancelled, g runs (compensated); 3 j fails and h's undo fails
    (compensation_failed).
    """
    variant = n % 4
    wf = Workflow(f"flow-{n:03}", System())

    def node(name: str, *after: object, fails: bool = False, always: bool = False) -> object:
        task = tasks.fault_fail if fails else tasks.fault_work
        options = TaskOptions() if fails else RETRIES
        added = wf.add(name, task, args=[NODE_HOLD], options=options).priority(NODE_PRIORITY)
        if after:
            added.after(*after)  # type: ignore[arg-type]
        if always:
            added.always()
        return added

    def undo(added: object, *, fails: bool = False) -> None:
        task = tasks.fault_fail if fails else tasks.fault_work
        added.undo(task, args=[NODE_HOLD])  # type: ignore[attr-defined]

    a = node("a")
    undo(a)
    b = node("b", a)
    undo(b)
    c = node("c", a, fails=variant == 2)
    d = node("d", b, c)
    undo(d)
    e = node("e", d)
    f = node("f", d, fails=variant == 1)
    g = node("g", e, f, always=True)
    h = node("h", g)
    undo(h, fails=variant == 3)
    i = node("i", h)
    node("j", i, always=True, fails=variant == 3)
    return wf


@pytest.mark.timeout(600 if SCALE.name == "full" else 300)
def test_kill_9_chaos_loses_nothing_and_reruns_only_the_killed_workers_runs(
    faults_db: FaultDatabase,
    fault_workers: FaultWorkers,
    report_figures: Callable[[Figures], None],
) -> None:
    store = faults_db.store()
    workers = [fault_workers.start("--concurrency", "4") for _ in range(WORKERS)]
    fault_workers.wait_registered(workers, ALIAS)
    began = time.monotonic()
    subs = [
        TaskSubmission(
            key=f"plain-{i:05}",
            task=tasks.fault_work,
            args=[HOLDS[i % len(HOLDS)]],
            options=RETRIES,
            scope="global",
        )
        for i in range(SCALE.chaos_tasks)
    ]
    ids = submit_tasks(subs, System(), store=store)
    for n in range(SCALE.chaos_workflows):
        chaos_workflow(n).submit(store=store)

    rng = random.Random(20261207)
    deadline = time.monotonic() + 240.0 + SCALE.chaos_tasks / 20
    while live_counts(ALIAS) != (0, 0) and time.monotonic() < deadline:
        pause = time.monotonic() + rng.uniform(*SCALE.chaos_kill_every)
        while time.monotonic() < pause and live_counts(ALIAS) != (0, 0):
            threading.Event().wait(0.1)
        if live_counts(ALIAS) == (0, 0):
            break
        fault_workers.kill(rng.choice(fault_workers.live()))
        fault_workers.start("--concurrency", "4")
    kills = len(fault_workers.killed)
    assert kills >= 3, f"only {kills} kills before the drain ended: submit more work"
    wait_drained(ALIAS, timeout=120.0, stall=30.0)

    figures = check_invariants(ALIAS, killed=fault_workers.killed, submitted=ids)
    figures.duration = time.monotonic() - began
    ends = Counter(WorkflowRecord.objects.using(ALIAS).values_list("state", flat=True))
    figures.extra = {"workflow-ends": ",".join(f"{k}:{v}" for k, v in sorted(ends.items()))}
    report_figures(figures)
