"""``manage.py workers``: the operators' tool to see and manage tasks and workers.

Subcommands: status, list, show, cancel, retry, rerun-workflow, purge, schedules.
It acts as ``System()``: it sees and manages every user's tasks and workflows.
Tables for people, ``--json`` for scripts. The work is done by
``django_workers.operations`` and the public API; this module parses and prints.

Exit codes: 0 done; 1 a task could not be cancelled or retried (or a workflow
re-run), or the store keeps no records this process can see; 2 bad command-line
arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_workers import operations
from django_workers.api import cancel_task, get_all_tasks, get_task_status
from django_workers.authority import Authority, System
from django_workers.database_checks import missing_tables
from django_workers.exceptions import (
    InvalidTaskKey,
    TaskAlreadyFinished,
    TaskNotFound,
    WorkersError,
    WorkflowNotFound,
)
from django_workers.info import TaskInfo, TaskStatus
from django_workers.management.arguments import limit, owner, seconds, task_status
from django_workers.periodic.overview import ScheduleView, schedule_overview
from django_workers.stores import WorkerStore, default_store
from django_workers.workflows import rerun_workflow

HELP = (
    "See and manage django-workers tasks and workers. Acts as System(): it sees, "
    "cancels, retries and deletes the tasks of every user."
)


class Command(BaseCommand):
    help = HELP

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common = argparse.ArgumentParser(add_help=False)
        common.add_argument("--json", action="store_true", help="Print JSON for scripts.")
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        sub.add_parser(
            "status",
            parents=[common],
            help="Live workers, and each queue's pending, running and recently ended tasks.",
        )
        listing = sub.add_parser("list", parents=[common], help="Tasks, newest first.")
        listing.add_argument("--status", type=task_status, help="Only tasks in this status.")
        listing.add_argument("--queue", help="Only tasks of this queue.")
        listing.add_argument("--owner", type=owner, help="Only tasks this user id owns or watches.")
        listing.add_argument("--limit", type=limit, default=50, help="At most N tasks (50).")
        show = sub.add_parser("show", parents=[common], help="Every field of one task.")
        show.add_argument("task_id", metavar="ID", help="The task id, as list shows it.")
        cancel = sub.add_parser("cancel", parents=[common], help="Cancel tasks.")
        cancel.add_argument("task_ids", metavar="ID", nargs="+", help="Task ids.")
        retry = sub.add_parser(
            "retry", parents=[common], help="Run FAILED or CANCELLED tasks again, same id."
        )
        retry.add_argument("task_ids", metavar="ID", nargs="+", help="Task ids.")
        retry.add_argument(
            "--completed", action="store_true", help="Also run COMPLETED tasks again."
        )
        rerun = sub.add_parser(
            "rerun-workflow",
            parents=[common],
            help="Run failed, cancelled or compensation_failed workflows again from where they "
            "failed; completed steps keep their results.",
        )
        rerun.add_argument("workflow_ids", metavar="ID", nargs="+")
        purge = sub.add_parser(
            "purge",
            parents=[common],
            help="Delete finished tasks by status and age (a dry run without --yes).",
        )
        purge.add_argument(
            "--status",
            type=task_status,
            action="append",
            dest="statuses",
            help="COMPLETED, FAILED or CANCELLED; repeat for several (default: all three).",
        )
        purge.add_argument(
            "--older-than",
            type=seconds,
            default=None,
            help="Finished more than this many seconds ago (default: each status's RETENTION).",
        )
        purge.add_argument("--yes", action="store_true", help="Delete; without it, only count.")
        sub.add_parser(
            "schedules",
            parents=[common],
            help="Periodic schedules: state, next tick, last tick and its task's status.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        store = default_store()
        if not store.durable:
            raise CommandError(
                f"DJANGO_WORKERS['STORE'] is {type(store).__name__}, which keeps tasks in the "
                "memory of one process; this command runs in its own process and would see "
                "none. Use it with a durable store such as the database store."
            )
        if problem := missing_tables():
            raise CommandError(problem)
        self.as_json = options["json"]
        handler: Callable[[WorkerStore, dict[str, Any]], None] = getattr(
            self, f"do_{options['subcommand'].replace('-', '_')}"
        )
        handler(store, options)

    # -- subcommands --

    def do_status(self, store: WorkerStore, options: dict[str, Any]) -> None:
        report = operations.status(store)
        if self.as_json:
            return self._json(status_json(report))
        self._write(f"Workers (stale: no heartbeat for more than {report.lease_timeout:g} s)")
        if report.workers:
            self._write(table(WORKER_COLUMNS, [worker_row(w) for w in report.workers]))
        else:
            self._write("  none registered")
        self._write("\nQueues")
        if report.queues:
            self._write(table(QUEUE_COLUMNS, [queue_row(q) for q in report.queues]))
        else:
            self._write("  no pending, running or recently ended tasks")

    def do_list(self, store: WorkerStore, options: dict[str, Any]) -> None:
        authority: Authority = options["owner"] or System()
        found = get_all_tasks(
            authority,
            status=options["status"],
            queue=options["queue"],
            limit=options["limit"],
            store=store,
        )
        if self.as_json:
            return self._json([task_json(info) for info in found])
        if not found:
            return self._write("No tasks.")
        self._write(table(LIST_COLUMNS, [list_row(info) for info in found]))

    def do_show(self, store: WorkerStore, options: dict[str, Any]) -> None:
        try:
            info = get_task_status(options["task_id"], System(), store=store)
        except TaskNotFound as e:
            raise CommandError(f"No task {options['task_id']!r}.") from e
        except InvalidTaskKey as e:
            raise CommandError(str(e)) from e
        if self.as_json:
            return self._json(task_json(info))
        self._write(show_text(info))

    def do_cancel(self, store: WorkerStore, options: dict[str, Any]) -> None:
        results = [cancel_one(task_id, store) for task_id in options["task_ids"]]
        self._outcomes(results, "cancelled")

    def do_retry(self, store: WorkerStore, options: dict[str, Any]) -> None:
        results = [
            retry_one(task_id, options["completed"], store) for task_id in options["task_ids"]
        ]
        self._outcomes(results, "retried")

    def do_rerun_workflow(self, store: WorkerStore, options: dict[str, Any]) -> None:
        results = [rerun_one(workflow_id, store) for workflow_id in options["workflow_ids"]]
        self._outcomes(results, "re-run", "workflows")

    def do_purge(self, store: WorkerStore, options: dict[str, Any]) -> None:
        try:
            plan = operations.purge_plan(options["statuses"], options["older_than"])
        except WorkersError as e:
            raise CommandError(str(e)) from e
        if options["yes"]:
            lines = operations.purge(plan, store=store)
        else:
            lines = operations.count_purgeable(plan, store=store)
        if self.as_json:
            return self._json(
                {
                    "deleted": bool(options["yes"]),
                    "statuses": [
                        {"status": str(p.status), "before": p.before.isoformat(), "count": p.count}
                        for p in lines
                    ],
                }
            )
        if not lines:
            return self._write("Nothing to purge: every status chosen is kept forever.")
        verb = "deleted" if options["yes"] else "would delete"
        for p in lines:
            self._write(f"{p.status}: {verb} {p.count}, finished before {p.before.isoformat()}")
        if not options["yes"]:
            self._write("Dry run: nothing was deleted. Pass --yes to delete.")

    def do_schedules(self, store: WorkerStore, options: dict[str, Any]) -> None:
        views = schedule_overview(store)
        if self.as_json:
            return self._json([schedule_json(v) for v in views])
        if not views:
            return self._write("No schedules declared.")
        self._write(table(SCHEDULE_COLUMNS, [schedule_row(v) for v in views]))

    # -- output --

    def _outcomes(self, results: list[dict[str, str]], success: str, noun: str = "tasks") -> None:
        if self.as_json:
            self._json(results)
        else:
            for r in results:
                self._write(
                    f"{r['id']}: {r['outcome']}" + (f" ({r['detail']})" * bool(r["detail"]))
                )
        failed = sum(r["outcome"] != success for r in results)
        if failed:
            raise CommandError(f"{failed} of {len(results)} {noun} not {success}.", returncode=1)

    def _json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, indent=2, sort_keys=True))

    def _write(self, text: str) -> None:
        self.stdout.write(text)


# -- the actions on one id --


def cancel_one(task_id: str, store: WorkerStore) -> dict[str, str]:
    """Cancel one task as System(); say what happened."""
    try:
        info = cancel_task(task_id, System(), store=store)
    except TaskNotFound:
        return {"id": task_id, "outcome": "not found", "detail": ""}
    except InvalidTaskKey as e:
        return {"id": task_id, "outcome": "invalid id", "detail": str(e)}
    except TaskAlreadyFinished as e:
        return {"id": task_id, "outcome": "already finished", "detail": str(e.status)}
    return {"id": task_id, "outcome": "cancelled", "detail": str(info.status)}


def retry_one(task_id: str, completed: bool, store: WorkerStore) -> dict[str, str]:
    """Re-run one finished task; say what happened."""
    try:
        old, run_id = operations.retry(task_id, allow_completed=completed, store=store)
    except TaskNotFound:
        return {"id": task_id, "outcome": "not found", "detail": ""}
    except InvalidTaskKey as e:
        return {"id": task_id, "outcome": "invalid id", "detail": str(e)}
    except WorkersError as e:  # not retryable, refused by the queue authorizer, moved task
        return {"id": task_id, "outcome": "refused", "detail": str(e)}
    return {"id": task_id, "outcome": "retried", "detail": f"was {old.status}, new run {run_id}"}


def rerun_one(workflow_id: str, store: WorkerStore) -> dict[str, str]:
    """Re-run one ended workflow as System(); say what happened."""
    try:
        info = rerun_workflow(workflow_id, System(), store=store)
    except WorkflowNotFound:
        return {"id": workflow_id, "outcome": "not found", "detail": ""}
    except WorkersError as e:  # not re-runnable (running, completed, compensated)
        return {"id": workflow_id, "outcome": "refused", "detail": str(e)}
    again = sum(1 for node in info.nodes if node.state != "completed")
    return {
        "id": workflow_id,
        "outcome": "re-run",
        "detail": f"run {info.runs}, {again} of {len(info.nodes)} nodes run again",
    }


# -- rendering --


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def task_json(info: TaskInfo) -> dict[str, Any]:
    """Every field of a snapshot as JSON: stable keys, ISO timestamps."""
    data: dict[str, Any] = {}
    for f in dataclasses.fields(info):
        if f.name.startswith("_"):
            continue
        value = getattr(info, f.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif f.name == "options":
            value = value.to_json()
        elif f.name == "error":
            value = value.to_json() if value is not None else None
        elif f.name == "errors":
            value = [e.to_json() for e in value]
        elif f.name == "watchers":
            value = list(value)
        elif isinstance(value, TaskStatus) or f.name == "cancel_reason":
            value = str(value)
        data[f.name] = value
    data["retrying"] = info.retrying
    data["max_attempts"] = info.max_attempts
    return data


def schedule_json(view: ScheduleView) -> dict[str, Any]:
    data = dataclasses.asdict(view)
    data["next_tick"], data["last_tick"] = iso(view.next_tick), iso(view.last_tick)
    return data


SCHEDULE_COLUMNS = ("KEY", "TASK", "WHEN", "CATCH-UP", "STATE", "NEXT TICK", "LAST TICK", "STATUS")


def schedule_row(view: ScheduleView) -> list[str]:
    return [
        view.key,
        view.task,
        view.timing,
        view.catch_up,
        view.state,
        short_time(view.next_tick),
        short_time(view.last_tick),
        view.last_status or "-",
    ]


def status_json(report: operations.Status) -> dict[str, Any]:
    return {
        "now": report.now.isoformat(),
        "lease_timeout": report.lease_timeout,
        "workers": [
            {
                "id": w.worker.id,
                "host": w.worker.host,
                "pid": w.worker.pid,
                "queues": list(w.worker.queues),
                "concurrency": w.worker.concurrency,
                "started_at": w.worker.started_at.isoformat(),
                "heartbeat_at": w.worker.heartbeat_at.isoformat(),
                "heartbeat_age": round(w.heartbeat_age, 3),
                "running": w.running,
                "held_slots": w.worker.held_slots,
                "wake_up": w.worker.wake_up,
                "stale": w.stale,
            }
            for w in report.workers
        ],
        "queues": [q.to_json() for q in report.queues],
    }


WORKER_COLUMNS = (
    "ID",
    "HOST",
    "PID",
    "QUEUES",
    "CONC",
    "HEARTBEAT",
    "RUNNING",
    "HELD",
    "WAKE-UP",
    "",
)
QUEUE_COLUMNS = (
    "QUEUE",
    "PENDING",
    "RETRYING",
    "RUNNING",
    "HELD",
    "LIMIT",
    "OLDEST PENDING",
    "DONE 5M/1H",
    "FAILED 5M/1H",
    "WORKERS",
    "",
)
LIST_COLUMNS = ("ID", "STATUS", "QUEUE", "PROGRESS", "ATTEMPTS", "CREATED", "FINISHED")


def worker_row(w: operations.WorkerState) -> list[str]:
    return [
        w.worker.id,
        w.worker.host,
        str(w.worker.pid),
        ",".join(w.worker.queues) or "all",
        str(w.worker.concurrency),
        f"{w.heartbeat_age:.1f} s",
        str(w.running),
        str(w.worker.held_slots),
        w.worker.wake_up or "-",
        "STALE" if w.stale else "",
    ]


def queue_row(q: operations.QueueState) -> list[str]:
    age = "-" if q.oldest_pending_age is None else f"{q.oldest_pending_age:.1f} s"
    note = "no live worker serves this queue" if q.unserved else ""
    return [
        q.queue,
        str(q.pending),
        str(q.retrying),
        str(q.running),
        str(q.held_slots),
        "-" if q.limit is None else str(q.limit),
        age,
        f"{q.completed_5m}/{q.completed_1h}",
        f"{q.failed_5m}/{q.failed_1h}",
        str(len(q.workers)),
        note,
    ]


def list_row(info: TaskInfo) -> list[str]:
    status = str(info.status)
    if info.retrying:
        status += f" (attempt {info.attempts + 1} of {info.max_attempts})"
    return [
        info.id,
        status,
        info.queue,
        f"{info.progress:g}%",
        str(info.attempts),
        short_time(info.created_at),
        short_time(info.finished_at),
    ]


def short_time(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(sep=" ", timespec="seconds")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; trailing blanks trimmed."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip()
        for r in [headers, *rows]
    ]
    return "\n".join(lines)


def show_text(info: TaskInfo) -> str:
    """Every field of a snapshot, one per line, then the traceback of its error."""
    data = task_json(info)
    error = data.pop("error")
    errors = data.pop("errors")
    width = max(len(k) for k in data)
    lines = [
        f"{k.ljust(width)}  {json.dumps(v) if not isinstance(v, str) else v}"
        for k, v in data.items()
    ]
    if summary := info.retry_summary():
        lines.append(f"{'retry'.ljust(width)}  {summary}")
    if error:
        lines.append(f"{'error'.ljust(width)}  {error['type']}: {error['message']}")
    if len(errors) > 1:
        lines.append(f"{'errors'.ljust(width)}  {len(errors)} failed attempts:")
        lines += [f"  {e['type']}: {e['message']}" for e in errors]
    if error and error["traceback"]:
        lines += ["", error["traceback"].rstrip()]
    return "\n".join(lines)
