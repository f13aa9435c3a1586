"""What must hold after any fault, read from the records and the ledger of executions.

``check_invariants`` is the fault suite's verdict. It reads every task record,
every workflow and every ``Execution`` row (one per execution of a task's
function, written by the task itself, see ``tests.tasks.fault_work``) and
checks that

- every task record has ended, and every task the test submitted exists;
- no two executions of one task overlapped in time;
- a task ran again only as the runtime allows: a retry (the same run, a later
  attempt, on any worker: a retry is a record), a recovery of a run whose worker
  process the test killed, or, after a crash of the server, the documented
  second execution of a run whose claim the crash lost (docs/runtime.md,
  "If PostgreSQL crashes"), which has the same run id and attempt;
- no record was recovered as a dead worker's (``WorkerLost``) unless the test
  killed a worker;
- every workflow has ended, in the state its nodes call for, each node's state
  agrees with its task record, and no node started before its dependencies'
  executions ended.

It raises one AssertionError listing every offending id, by kind, or returns
the figures of the run.

When an execution's ledger row has no end (the function raised before it
could write it, or returned without touching the database), its end is
bounded by what is known: the kill of its process, the start of the next
attempt of the same run (which its end made due), or the end stored in the
record by its own run.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django_workers.engine.records import WorkflowInfo
from django_workers.info import TERMINAL_STATUSES
from django_workers.models import TaskRecord, WorkflowRecord
from django_workers.stores.database import DatabaseWorkerStore
from tests.models import Execution

WORKER_LOST = "django_workers.exceptions.WorkerLost"
#: Ids listed per kind of problem in the failure message.
SHOWN = 20

NODE_ENDS = {"completed", "failed", "cancelled"}
UNDO_ENDS = {"completed", "failed", "cancelled"}
FAILURES = {"failed", "cancelled"}


@dataclass
class Figures:
    """What a fault run did, for its report."""

    tasks: int = 0
    workflows: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    executions: int = 0
    #: Later attempts of the same run, on any worker (the attempt before raised).
    retries: int = 0
    #: Runs executed again after the test killed the process that executed them.
    reexecutions: int = 0
    #: Runs executed twice because a crash of the server lost their claim.
    lost_claims: int = 0
    kills: int = 0
    #: Records that ended FAILED as a dead worker's (``WorkerLost``).
    worker_lost: int = 0
    #: Submitted tasks with no record, or whose record has not ended.
    lost: int = 0
    overlaps: int = 0
    duration: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """One line of ``name=value`` pairs, as the fault suite's summary prints them."""
        pairs = {
            "tasks": self.tasks,
            "workflows": self.workflows,
            "kills": self.kills,
            "executions": self.executions,
            "re-executions": self.reexecutions,
            "retries": self.retries,
            "lost-claims": self.lost_claims,
            "worker-lost": self.worker_lost,
            "lost": self.lost,
            "overlaps": self.overlaps,
            "duration": f"{self.duration:.1f}s",
            **self.extra,
        }
        statuses = ",".join(f"{k}:{v}" for k, v in sorted(self.statuses.items()))
        return " ".join(f"{k}={v}" for k, v in pairs.items()) + f" statuses={statuses}"


@dataclass
class _Problems:
    by_kind: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, item: str) -> None:
        self.by_kind[kind].append(item)

    def message(self) -> str:
        count = sum(len(items) for items in self.by_kind.values())
        lines = [f"{count} fault-suite invariant violations:"]
        for kind, items in self.by_kind.items():
            shown = ", ".join(items[:SHOWN])
            more = f" ... and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
            lines.append(f"- {kind} ({len(items)}): {shown}{more}")
        return "\n".join(lines)


@dataclass
class _Run:
    """One execution from the ledger, with the end the checker could bound it by."""

    pk: int
    task_id: str
    run_id: str
    attempt: int
    pid: int
    started_at: datetime
    finished_at: datetime | None
    end: datetime | None = None

    def label(self) -> str:
        return f"pid {self.pid} run {self.run_id[:8]} attempt {self.attempt}"


def check_invariants(
    using: str,
    *,
    killed: Mapping[int, datetime],
    submitted: Collection[str] = (),
    server_crashed: bool = False,
    cancelled_workflows: Collection[str] = (),
) -> Figures:
    """Check every fault-suite invariant on database ``using``; the figures, or AssertionError.

    ``killed`` maps each pid the test killed with SIGKILL to when; ``submitted`` are
    the ids of the tasks the test submitted (workflow nodes need not be listed);
    ``server_crashed`` allows the second execution of a run whose claim a crash of
    the server lost; ``cancelled_workflows`` may end ``cancelled``.
    """
    problems = _Problems()
    records = {
        r["id"]: r
        for r in TaskRecord.objects.using(using).values(
            "id", "status", "run_id", "attempts", "finished_at", "error", "errors", "workflow"
        )
    }
    figures = Figures(tasks=len(records), kills=len(killed))
    figures.statuses = dict(Counter(r["status"] for r in records.values()))
    _check_records(records, submitted, killed, problems, figures)
    runs = _ledger(using)
    figures.executions = sum(len(r) for r in runs.values())
    for task_id, executions in runs.items():
        _check_executions(
            task_id, executions, records.get(task_id), killed, server_crashed, problems, figures
        )
    store = DatabaseWorkerStore(using)
    flows = list(WorkflowRecord.objects.using(using).values_list("id", flat=True))
    figures.workflows = len(flows)
    for workflow_id in flows:
        info = store.get_workflow(workflow_id)
        assert info is not None
        _check_workflow(info, records, runs, cancelled_workflows, problems)
    if problems.by_kind:
        raise AssertionError(problems.message() + "\nfigures: " + figures.line())
    return figures


def _check_records(
    records: Mapping[str, Mapping[str, Any]],
    submitted: Collection[str],
    killed: Mapping[int, datetime],
    problems: _Problems,
    figures: Figures,
) -> None:
    for task_id in submitted:
        if task_id not in records:
            problems.add("submitted but no record (lost)", task_id)
            figures.lost += 1
        elif records[task_id]["status"] not in TERMINAL_STATUSES:
            figures.lost += 1
    for task_id, record in records.items():
        if record["status"] not in TERMINAL_STATUSES:
            problems.add("record not ended", f"{task_id} ({record['status']})")
        if _worker_lost(record):
            figures.worker_lost += record["status"] == "FAILED"
            if not killed:
                problems.add(
                    "recovered as a dead worker's though no worker was killed (WorkerLost)",
                    task_id,
                )


def _worker_lost(record: Mapping[str, Any]) -> bool:
    errors = [record["error"], *(record["errors"] or [])]
    return any(isinstance(e, dict) and e.get("type") == WORKER_LOST for e in errors)


def _ledger(using: str) -> dict[str, list[_Run]]:
    runs: dict[str, list[_Run]] = defaultdict(list)
    rows = (
        Execution.objects.using(using)
        .order_by("started_at", "pk")
        .values("pk", "task_id", "run_id", "attempt", "pid", "started_at", "finished_at")
    )
    for row in rows:
        runs[row["task_id"]].append(_Run(**row))
    return runs


def _check_executions(
    task_id: str,
    runs: list[_Run],
    record: Mapping[str, Any] | None,
    killed: Mapping[int, datetime],
    server_crashed: bool,
    problems: _Problems,
    figures: Figures,
) -> None:
    for i, run in enumerate(runs):
        run.end = _end_of(run, runs[i + 1] if i + 1 < len(runs) else None, record, killed)
        if run.end is None:
            problems.add("execution with no known end", f"{task_id} ({run.label()})")
    for previous, run in itertools.pairwise(runs):
        if previous.pid in killed:
            figures.reexecutions += 1
        elif _is_retry(previous, run):
            figures.retries += 1
        elif server_crashed and (previous.run_id, previous.attempt) == (run.run_id, run.attempt):
            figures.lost_claims += 1
        else:
            problems.add(
                "run again though the process that ran it was not killed",
                f"{task_id} ({previous.label()}, then {run.label()})",
            )
    latest: _Run | None = None
    for run in runs:
        if latest is not None and latest.end is not None and run.started_at < latest.end:
            figures.overlaps += 1
            problems.add(
                "overlapping executions",
                f"{task_id} ({latest.label()} until {latest.end:%H:%M:%S.%f}, "
                f"{run.label()} from {run.started_at:%H:%M:%S.%f})",
            )
        if run.end is not None and (latest is None or latest.end is None or run.end > latest.end):
            latest = run


def _is_retry(previous: _Run, run: _Run) -> bool:
    """The same run's next attempt, on any worker: its previous attempt raised."""
    return previous.run_id == run.run_id and run.attempt > previous.attempt


def _end_of(
    run: _Run,
    following: _Run | None,
    record: Mapping[str, Any] | None,
    killed: Mapping[int, datetime],
) -> datetime | None:
    """When ``run`` ended, or the latest it can have ended; None if nothing bounds it."""
    if run.finished_at is not None:
        return run.finished_at
    if run.pid in killed:
        return killed[run.pid]
    if following is not None and _is_retry(run, following):
        # A retry is claimed once the end of the attempt before it was written.
        return following.started_at
    if (
        record is not None
        and record["status"] in TERMINAL_STATUSES
        and (record["run_id"], record["attempts"]) == (run.run_id, run.attempt)
        and record["finished_at"] is not None
        and not _worker_lost(record)
    ):
        return record["finished_at"]  # the run's own end, stamped as its function returned
    return None


def _check_workflow(
    info: WorkflowInfo,
    records: Mapping[str, Mapping[str, Any]],
    runs: Mapping[str, list[_Run]],
    cancelled: Collection[str],
    problems: _Problems,
) -> None:
    if not info.is_finished:
        problems.add("workflow not ended", f"{info.id} ({info.state})")
        return
    for node in info.nodes:
        _check_node_record(info.id, node.name, node.state, node.task_id, records, problems)
        if node.undo is not None and node.undo.task_id is not None:
            name = f"{node.name}:undo"
            _check_node_record(info.id, name, node.undo.state, node.undo.task_id, records, problems)
    expected = _expected_end(info, cancelled)
    if info.state not in expected:
        states = ", ".join(f"{n.name}={n.state}" for n in info.nodes)
        problems.add(
            "workflow ended in a state its nodes do not call for",
            f"{info.id} ({info.state}; nodes call for {'/'.join(sorted(expected))}: {states})",
        )
    for node in info.nodes:
        started = runs.get(node.task_id)
        if not started:
            continue
        for dep in node.deps:
            ends = [r.end for r in runs.get(info.node(dep).task_id, []) if r.end is not None]
            if ends and started[0].started_at < max(ends):
                problems.add(
                    "workflow node started before its dependency ended",
                    f"{info.id} ({node.name} before {dep})",
                )


def _check_node_record(
    workflow_id: str,
    name: str,
    state: str,
    task_id: str,
    records: Mapping[str, Mapping[str, Any]],
    problems: _Problems,
) -> None:
    record = records.get(task_id)
    if record is None:
        if state not in ("idle", "waiting"):
            problems.add("workflow node without a record", f"{workflow_id}:{name} ({state})")
        return
    if state not in NODE_ENDS or record["status"].lower() != state:
        problems.add(
            "workflow node disagrees with its record",
            f"{workflow_id}:{name} (node {state}, record {record['status']})",
        )


def _expected_end(info: WorkflowInfo, cancelled: Collection[str]) -> set[str]:
    """The end states the workflow's nodes allow (the rules in docs/workflows.md)."""
    dependents: dict[str, list[bool]] = defaultdict(list)
    for node in info.nodes:
        for dep in node.deps:
            dependents[dep].append(node.always)
    unabsorbed = [
        n
        for n in info.nodes
        if n.state in FAILURES and not (dependents[n.name] and all(dependents[n.name]))
    ]
    due = [n for n in info.nodes if n.undo is not None and n.state == "completed"]
    undos = {n.undo.state for n in due if n.undo is not None}
    stray = [n for n in info.nodes if n.undo is not None and n.state != "completed"]
    if any(n.undo is not None and n.undo.state != "idle" for n in stray):
        return set()  # an undo of a node that did not complete: no end is right
    if not unabsorbed:
        if info.id in cancelled:
            return {"cancelled", "compensated", "compensation_failed"}
        # Every node completed or its failure was absorbed; nothing is ever undone.
        return {"completed"} if undos <= {"idle"} else set()
    if not due:
        return {"failed", "cancelled"} if info.id in cancelled else {"failed"}
    if not undos <= UNDO_ENDS:
        return set()  # compensation due and not over: the workflow cannot have ended
    return {"compensated"} if undos == {"completed"} else {"compensation_failed"}
