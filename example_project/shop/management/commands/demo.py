"""``manage.py demo``: submit the shop's demo tasks and workflows, run them, report.

It clears the records of earlier demos, submits one task per feature as the
user ``demo-user`` (and one site-wide task as ``System()``) and two
workflows (a photo upload across three queues with an ``.always()`` node, and
an order saga whose failing last step undoes the others), runs
``manage.py runworkers`` as a separate process, cancels the long export from
this process while it runs, waits until every task and workflow has ended and
the ``ping-monitoring`` schedule of the settings has fired twice, stops the
worker with SIGTERM, then prints each task's outcome and exits non-zero if any
task or workflow did not end as it should.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q
from django.tasks import TaskResultStatus

from django_workers import (
    Owner,
    System,
    TaskAlreadyFinished,
    TaskInfo,
    TaskNotFound,
    TaskOptions,
    TaskStatus,
    TaskSubmission,
    Workflow,
    WorkflowHandle,
    WorkflowInfo,
    cancel_task,
    get_task_status,
    submit_task,
    submit_tasks,
)
from django_workers.models import ScheduleRecord, TaskRecord, WorkflowRecord
from shop import tasks

DEMO_USER = Owner("demo-user")
#: The global (unscoped) keys the demo submits; everything else belongs to demo-user.
GLOBAL_KEYS = ("search-index",)
RECEIPTS = (1001, 1002, 1003)
#: Clock slack when checking that receipts did not overlap (each takes 200 ms).
OVERLAP_SLACK = timedelta(milliseconds=50)
#: How long the long export may take to get going before the demo gives up.
START_DEADLINE = 20.0
#: The export's progress (%) at which the demo cancels it: mid-run, with work done.
CANCEL_AT = 5
#: The schedule of the settings the demo watches fire, and how many of its ticks.
SCHEDULE = "ping-monitoring"
TICKS = 2


@dataclass(frozen=True)
class Expected:
    """How a demo task should end."""

    status: TaskStatus
    attempts: int | None = None
    progress: float | None = None
    error_type: str | None = None
    cancel_reason: str | None = None

    def problems(self, info: TaskInfo) -> list[str]:
        """What differs between ``info`` and this expectation."""
        found = []
        if info.status != self.status:
            found.append(f"status {info.status}, expected {self.status}")
        if self.attempts is not None and info.attempts != self.attempts:
            found.append(f"{info.attempts} attempts, expected {self.attempts}")
        if self.progress is not None and info.progress != self.progress:
            found.append(f"progress {info.progress:g}%, expected {self.progress:g}%")
        error_type = info.error.type.rsplit(".", 1)[-1] if info.error else None
        if self.error_type is not None and error_type != self.error_type:
            found.append(f"error {error_type}, expected {self.error_type}")
        if self.cancel_reason is not None and info.cancel_reason != self.cancel_reason:
            found.append(f"cancel reason {info.cancel_reason}, expected {self.cancel_reason}")
        return found


@dataclass
class DemoTask:
    """One task of the demo: what it is meant to show, how it should end, how it did."""

    key: str
    shows: str
    expected: Expected
    task_id: str = ""
    info: TaskInfo | None = None
    extra_problems: list[str] = field(default_factory=list)


def submit_demo_tasks() -> dict[str, str]:
    """Submit every demo task; return the task ids (not the keys) by key."""
    ids = {
        "resize-images": submit_task(
            "resize-images", tasks.resize_images, DEMO_USER, args=[1001, 8]
        ),
        "charge-card": submit_task(
            "charge-card",
            tasks.charge_card,
            DEMO_USER,
            args=[1001, 2],
            options=TaskOptions(retries=3, retry_backoff=0.1, retry_backoff_max=0.5),
        ),
        "export-catalog": submit_task(
            "export-catalog", tasks.export_catalog, DEMO_USER, args=[400]
        ),
        "sync-inventory": submit_task(
            "sync-inventory",
            tasks.sync_inventory,
            DEMO_USER,
            args=["north"],
            options=TaskOptions(retries=1, retry_backoff=0.1),
        ),
        "sales-report": submit_task(
            "sales-report",
            tasks.build_sales_report,
            DEMO_USER,
            args=[30],
            options=TaskOptions(timeout=1, retries=2, retry_backoff=0.1),
        ),
        # Site-wide work: System() owns nothing, so the id is global (the key itself).
        "search-index": submit_task(
            "search-index", tasks.rebuild_search_index, System(), scope="global"
        ),
        # Plain Django: TASKS names our backend, so .enqueue() writes a record too.
        "django-enqueue": tasks.rebuild_search_index.enqueue().id,
    }
    # Several tasks in one call: written in one statement where the database allows.
    receipts = [
        TaskSubmission(key=f"receipt-{n}", task=tasks.send_receipt, args=[n], queue="emails")
        for n in RECEIPTS
    ]
    ids.update(zip((r.key for r in receipts), submit_tasks(receipts, DEMO_USER), strict=True))
    return ids


def demo_tasks() -> list[DemoTask]:
    """The demo's tasks, in the order they are reported."""
    return [
        DemoTask(
            "resize-images",
            "progress: update_progress(current_run(), pct) after each of 8 steps",
            Expected(TaskStatus.COMPLETED, attempts=1, progress=100),
        ),
        DemoTask(
            "charge-card",
            "retries: fails twice (gateway down), succeeds on attempt 3 after backoff",
            Expected(TaskStatus.COMPLETED, attempts=3),
        ),
        DemoTask(
            "export-catalog",
            "cancel: cancelled by this process while it ran; it polls raise_if_cancelled()",
            Expected(TaskStatus.CANCELLED, attempts=1, cancel_reason="user"),
        ),
        DemoTask(
            "sync-inventory",
            "failure: raises every time; retries=1 gives up after 2 attempts",
            Expected(TaskStatus.FAILED, attempts=2, error_type="LookupError"),
        ),
        DemoTask(
            "sales-report",
            "timeout: 1 s limit on 30 s of work; FAILED and never retried (retries=2)",
            Expected(
                TaskStatus.FAILED,
                attempts=1,
                error_type="TaskTimeoutError",
                cancel_reason="timeout",
            ),
        ),
        DemoTask(
            "search-index",
            "System(): a global task with no owner; demo-user cannot see it",
            Expected(TaskStatus.COMPLETED, attempts=1),
        ),
        DemoTask(
            "django-enqueue",
            "django.tasks: @task .enqueue() via WorkersBackend; get_result() says SUCCESSFUL",
            Expected(TaskStatus.COMPLETED, attempts=1),
        ),
        *(
            DemoTask(
                f"receipt-{n}",
                "sequential queue: 'emails' has concurrency 1, so one at a time, in order",
                Expected(TaskStatus.COMPLETED, attempts=1),
            )
            for n in RECEIPTS
        ),
    ]


@dataclass
class DemoWorkflow:
    """One workflow of the demo: what it shows, how it should end, how it did."""

    shows: str
    handle: WorkflowHandle
    state: str
    nodes: dict[str, str]
    undos: dict[str, str] = field(default_factory=dict)
    info: WorkflowInfo | None = None
    extra_problems: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        info = self.info
        assert info is not None
        found = [] if info.state == self.state else [f"state {info.state}, expected {self.state}"]
        for node in info.nodes:
            if self.nodes.get(node.name, node.state) != node.state:
                found.append(f"node {node.name} {node.state}, expected {self.nodes[node.name]}")
            expected_undo = self.undos.get(node.name)
            if expected_undo and (node.undo is None or node.undo.state != expected_undo):
                found.append(f"undo of {node.name} not {expected_undo}")
        return found + self.extra_problems


def submit_demo_workflows() -> list[DemoWorkflow]:
    """Submit the photo workflow and the order saga as demo-user."""
    photo = Workflow("photo-7", DEMO_USER)
    upload = photo.add("upload", tasks.upload_photo, args=[7]).undo(tasks.delete_upload, args=[7])
    small = photo.add("thumb-small", tasks.make_thumbnail, args=[128], queue="images")
    large = photo.add("thumb-large", tasks.make_thumbnail, args=[4096], queue="images")
    small.after(upload)
    large.after(upload)
    email = photo.add(
        "email", tasks.email_photo_owner, args=[7, "thumb-small", "thumb-large"], queue="emails"
    )
    email.after(small, large).always()

    order = Workflow("order-2001", DEMO_USER)
    reserve = order.add("reserve", tasks.reserve_stock, args=[2001])
    reserve.undo(tasks.release_stock, args=[2001])
    charge = order.add("charge", tasks.charge_card, args=[2001, 0]).after(reserve)
    charge.undo(tasks.refund_card, args=[2001], queue="payments")
    order.add("ship", tasks.book_courier, args=[2001]).after(charge)
    return [
        DemoWorkflow(
            "workflow: upload, 2 thumbnails on 'images' (one fails), an .always() email",
            photo.submit(),
            "completed",
            {
                "upload": "completed",
                "thumb-small": "completed",
                "thumb-large": "failed",
                "email": "completed",
            },
        ),
        DemoWorkflow(
            "saga: reserve, charge, ship fails; the charge is refunded, then stock released",
            order.submit(),
            "compensated",
            {"reserve": "completed", "charge": "completed", "ship": "failed"},
            {"reserve": "completed", "charge": "completed"},
        ),
    ]


class Command(BaseCommand):
    help = (
        "Submit the shop's demo tasks, run them with 'runworkers --burst' in a separate "
        "process, cancel one from here while it runs, and print how each ended."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--timeout",
            type=float,
            default=60.0,
            help="Seconds the workers may take before the demo stops them and fails.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        demos = demo_tasks()
        self.clear_earlier_runs()
        self.section("Submitting the demo tasks")
        ids = submit_demo_tasks()
        for demo in demos:
            demo.task_id = ids[demo.key]
            self.stdout.write(f"  {demo.key:16} -> id {demo.task_id!r}")
        workflows = submit_demo_workflows()
        for flow in workflows:
            self.stdout.write(f"  workflow -> id {flow.handle.id!r}")
        export = next(d for d in demos if d.key == "export-catalog")

        self.section("Running: manage.py runworkers --concurrency 4")
        started = time.monotonic()
        worker = self.start_workers(options["verbosity"])
        deadline = started + options["timeout"]
        cancelled_at = self.cancel_when_running(export, worker, deadline)
        self.wait_until_done(demos, workflows, worker, deadline)
        worker.send_signal(signal.SIGTERM)
        code = self.wait_for(worker, max(deadline, time.monotonic() + 15))
        self.stdout.write(
            f"runworkers exited with code {code} after {self.since(started)} "
            "(stopped with SIGTERM once every task and workflow had ended)"
        )
        if cancelled_at is not None:
            self.stdout.write(f"  ({self.since(cancelled_at)} after the cancel)")

        ticks = self.schedule_ticks()
        demos += ticks
        for demo in demos:
            demo.info = get_task_status(demo.task_id, System())
        self.check_visibility(demos)
        self.check_django_result(next(d for d in demos if d.key == "django-enqueue"))
        self.check_sequential([d for d in demos if d.key.startswith("receipt-")])
        for flow in workflows:
            flow.info = flow.handle.status()
        self.check_saga_order(workflows[1])
        failed = self.report(demos) + self.report_workflows(workflows)
        if code != 0:
            raise CommandError(f"runworkers exited with code {code}, expected 0.")
        if len(ticks) < TICKS:
            raise CommandError(f"Schedule {SCHEDULE!r} fired {len(ticks)} ticks, expected {TICKS}.")
        if failed:
            raise CommandError(
                f"{failed} of {len(demos)} tasks and {len(workflows)} workflows did not end "
                "as expected."
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"All {len(demos)} tasks and {len(workflows)} workflows ended as expected."
            )
        )

    # -- steps --

    def clear_earlier_runs(self) -> None:
        """Delete the records an earlier demo left, so every task starts as a fresh run."""
        # The model, not the task API: the API has no delete, only cancel and retention.
        stale = TaskRecord.objects.filter(
            Q(owner=DEMO_USER.user_id)
            | Q(id__in=GLOBAL_KEYS)
            | Q(task_path=tasks.rebuild_search_index.module_path)
            | Q(id__startswith=f"schedule:{SCHEDULE}:")
        )
        # Its schedule starts afresh too: no late tick from an earlier demo's last one.
        ScheduleRecord.objects.filter(pk=SCHEDULE).delete()
        deleted, _ = stale.delete()
        deleted += WorkflowRecord.objects.filter(owner=DEMO_USER.user_id).delete()[0]
        if deleted:
            self.stdout.write(f"Cleared {deleted} records of an earlier demo.")

    def start_workers(self, verbosity: int) -> subprocess.Popen[bytes]:
        manage = Path(settings.BASE_DIR) / "manage.py"
        command = [sys.executable, str(manage), "runworkers", "--concurrency", "4"]
        command += ["--verbosity", str(verbosity)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        sys.stdout.flush()
        return subprocess.Popen(command, cwd=manage.parent, env=env)

    def cancel_when_running(
        self, demo: DemoTask, worker: subprocess.Popen[bytes], deadline: float
    ) -> float | None:
        """Cancel ``demo`` once it runs and has made some progress; return when, or None."""
        deadline = min(deadline, time.monotonic() + START_DEADLINE)
        while time.monotonic() < deadline and worker.poll() is None:
            info = get_task_status(demo.task_id, DEMO_USER)
            if info.status == TaskStatus.RUNNING and info.progress >= CANCEL_AT:
                try:
                    after = cancel_task(demo.task_id, DEMO_USER)
                except TaskAlreadyFinished as e:
                    demo.extra_problems.append(f"ended before the cancel reached it: {e}")
                    return None
                self.stdout.write(
                    self.style.WARNING(
                        f">>> demo: cancelled {demo.key} at {info.progress:.0f}% "
                        f"(now {after.status}: {after.error.message if after.error else ''})"
                    )
                )
                self.stdout.flush()  # show it in step with the worker's log lines
                return time.monotonic()
            if info.is_finished:
                break
            time.sleep(0.05)
        demo.extra_problems.append(
            f"never seen RUNNING at {CANCEL_AT}% within {START_DEADLINE:g} s, so not cancelled"
        )
        return None

    def wait_until_done(
        self,
        demos: Sequence[DemoTask],
        workflows: Sequence[DemoWorkflow],
        worker: subprocess.Popen[bytes],
        deadline: float,
    ) -> None:
        """Wait until every demo task and workflow ended and the schedule's first ticks ran."""
        while time.monotonic() < deadline and worker.poll() is None:
            ended = all(get_task_status(d.task_id, System()).is_finished for d in demos)
            ended = ended and all(flow.handle.status().is_finished for flow in workflows)
            ticks = self.tick_records().filter(status=TaskStatus.COMPLETED).count()
            if ended and ticks >= TICKS:
                return
            time.sleep(0.1)

    @staticmethod
    def tick_records() -> Any:
        return TaskRecord.objects.filter(id__startswith=f"schedule:{SCHEDULE}:").order_by("id")

    def schedule_ticks(self) -> list[DemoTask]:
        """The schedule's first ticks, as demo tasks: each one record that ran once."""
        ids = list(self.tick_records().values_list("id", flat=True)[:TICKS])
        self.stdout.write(f"  schedule {SCHEDULE!r} enqueued: {', '.join(ids) or 'nothing'}")
        found = [
            DemoTask(
                f"tick-{n}",
                f"periodic: SCHEDULES[{SCHEDULE!r}] every 2 s; each tick one task, run once",
                Expected(TaskStatus.COMPLETED, attempts=1),
                task_id=task_id,
            )
            for n, task_id in enumerate(ids, 1)
        ]
        for before, after in pairwise(found):
            gap = tick_instant(after.task_id) - tick_instant(before.task_id)
            if gap != timedelta(seconds=2):
                after.extra_problems.append(f"{gap.total_seconds():g} s after {before.key}")
        return found

    def wait_for(self, worker: subprocess.Popen[bytes], deadline: float) -> int:
        try:
            return worker.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            self.stderr.write("The workers are taking too long; stopping them (SIGTERM).")
            worker.terminate()
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            raise CommandError("runworkers did not finish in time; see the log above.") from None

    def check_django_result(self, demo: DemoTask) -> None:
        """Django's own API reads the run's end back: TaskResult.status and return_value."""
        result = tasks.rebuild_search_index.get_result(demo.task_id)
        self.stdout.write(
            f"  get_result({demo.task_id!r}): status {result.status}, "
            f"return_value {result.return_value if result.is_finished else None!r}"
        )
        if result.status != TaskResultStatus.SUCCESSFUL:
            demo.extra_problems.append(f"get_result() said {result.status}, expected SUCCESSFUL")

    def check_visibility(self, demos: Sequence[DemoTask]) -> None:
        """A global task is invisible to a user who does not watch it: TaskNotFound."""
        for demo in demos:
            if demo.key in GLOBAL_KEYS:
                try:
                    get_task_status(demo.task_id, DEMO_USER)
                except TaskNotFound:
                    continue
                demo.extra_problems.append("demo-user can see it; it should get TaskNotFound")

    def check_sequential(self, receipts: Sequence[DemoTask]) -> None:
        """Each receipt started in submission order, after the previous one had finished."""
        for before, after in pairwise(receipts):
            a, b = before.info, after.info
            if not (a and b and a.started_at and a.finished_at and b.started_at):
                continue  # not run at all: its status check reports that
            if b.started_at < a.started_at:
                after.extra_problems.append(f"started before {before.key}")
            # started_at is stamped as the claim begins, a moment before it sees the
            # previous receipt finished; a real overlap would be a whole receipt long.
            elif b.started_at < a.finished_at - OVERLAP_SLACK:
                after.extra_problems.append(f"ran while {before.key} was still running")

    def check_saga_order(self, saga: DemoWorkflow) -> None:
        """The charge (a descendant of the reservation) was undone before the reservation."""
        info = saga.info
        assert info is not None
        refund, release = (info.node(name).undo for name in ("charge", "reserve"))
        if refund is None or release is None or not (refund.task_id and release.task_id):
            return  # not undone at all: the state check reports that
        refunded = get_task_status(refund.task_id, DEMO_USER)
        released = get_task_status(release.task_id, DEMO_USER)
        if not (refunded.finished_at and released.started_at):
            return
        if released.started_at < refunded.finished_at:
            saga.extra_problems.append("stock was released before the charge was refunded")

    # -- output --

    def report_workflows(self, workflows: Sequence[DemoWorkflow]) -> int:
        """Print each workflow's nodes and undos, and what it shows; return how many failed."""
        self.section("Workflows")
        failed = 0
        for flow in workflows:
            info = flow.info
            assert info is not None
            problems = flow.problems()
            mark = self.style.SUCCESS("ok  ") if not problems else self.style.ERROR("FAIL")
            self.stdout.write(f"  {mark}  {info.id}: {info.state}  ({flow.shows})")
            for node in info.nodes:
                state = node.state
                if node.undo and node.undo.task_id:
                    state += f" (undo {node.undo.state})"
                after = f"after {', '.join(node.deps)}" if node.deps else ""
                self.stdout.write(f"          {node.name:12} {state:28} {after}".rstrip())
            for problem in problems:
                self.stdout.write(self.style.ERROR(f"          ! {problem}"))
            failed += bool(problems)
        return failed

    def report(self, demos: Sequence[DemoTask]) -> int:
        """Print the outcome table and what each task shows; return how many went wrong."""
        self.section("Outcome")
        rows = [("task", "status", "attempts", "progress", "result or error")]
        for demo in demos:
            info = demo.info
            assert info is not None
            rows.append(
                (demo.key, info.status, str(info.attempts), f"{info.progress:.0f}%", outcome(info))
            )
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for n, row in enumerate(rows):
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            line = "  " + "  ".join([*cells, row[4]])
            self.stdout.write(self.style.MIGRATE_LABEL(line) if n == 0 else line)

        self.section("What each task shows")
        failed = 0
        key_width = max(len(d.key) for d in demos)
        for demo in demos:
            assert demo.info is not None
            problems = demo.expected.problems(demo.info) + demo.extra_problems
            mark = self.style.SUCCESS("ok  ") if not problems else self.style.ERROR("FAIL")
            self.stdout.write(f"  {mark}  {demo.key.ljust(key_width)}  {demo.shows}")
            for problem in problems:
                self.stdout.write(self.style.ERROR(f"        {'':{key_width}}  ! {problem}"))
            failed += bool(problems)
        return failed

    def section(self, title: str) -> None:
        self.stdout.write("")
        self.stdout.write(self.style.MIGRATE_HEADING(title))

    @staticmethod
    def since(moment: float) -> str:
        return f"{time.monotonic() - moment:.1f} s"


def tick_instant(task_id: str) -> datetime:
    """The UTC instant of a tick, from its task id (``schedule:<key>:<instant>``)."""
    return datetime.fromisoformat(task_id.split(":", 2)[2])


def outcome(info: TaskInfo, width: int = 60) -> str:
    """The task's result, or its error as "Type: message", cut to ``width`` characters."""
    if info.error is not None:
        text = f"{info.error.type.rsplit('.', 1)[-1]}: {info.error.message}"
    elif info.result is None:
        text = "-"
    else:
        text = json.dumps(info.result)
    return text if len(text) <= width else text[: width - 1] + "…"
