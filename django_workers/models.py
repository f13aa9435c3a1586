"""The tables: task records, their watchers, and the worker processes that run them.

Models hold data and named queries only; every state change goes through a
store (``stores/database/``) as a conditional update checked by row count.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict

from django.core import checks
from django.db import models
from django.db.models import Count, Min, Q
from django.utils import timezone

from django_workers.authority import KEY_MAX_LENGTH, OWNER_MAX_LENGTH, TASK_ID_MAX_LENGTH
from django_workers.bounds import (
    CRON_MAX_LENGTH,
    HOST_MAX_LENGTH,
    NODE_LABEL_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
    TASK_PATH_MAX_LENGTH,
    TIME_ZONE_MAX_LENGTH,
    WORKER_ID_MAX_LENGTH,
)
from django_workers.cancellation import CancelReason
from django_workers.info import TaskStatus


class QueueCountRow(TypedDict):
    """One row of ``queue_counts()``: live tasks of one queue, status and worker."""

    queue: str
    status: str
    worker_id: str | None
    count: int
    oldest: datetime
    retrying: int


#: The order tasks are claimed in: highest priority first, then oldest, then by id.
CLAIM_ORDER = ("-priority", "created_at", "id")


class PendingQueueIndex(models.Index):
    """PENDING rows by queue (then owner, or claim order); on PostgreSQL, without the status.

    PostgreSQL leaves out of an index scan's conditions whatever the index's own
    condition implies: ``status = 'PENDING'`` is not a condition of a scan of this
    index there, so a leading ``status`` column left the scan nothing to seek with,
    and a look-up of one queue read the index from its first entry (every pending
    row of the queues before it). Where a database keeps ``status`` in the scan
    (SQLite), or has no partial indexes and needs it (MariaDB, MySQL), it stays.
    """

    def create_sql(
        self, model: type[models.Model], schema_editor: Any, using: str = "", **kwargs: Any
    ) -> Any:
        if schema_editor.connection.vendor != "postgresql":
            return super().create_sql(model, schema_editor, using, **kwargs)
        fields = [name for name in self.fields if name != "status"]
        index = models.Index(
            fields=fields, name=self.name, condition=self.condition, include=self.include
        )
        return index.create_sql(model, schema_editor, using, **kwargs)


class TaskRecordQuerySet(models.QuerySet["TaskRecord"]):
    """Named queries over task records."""

    def ready(self, queues: list[str] | None, now: datetime) -> TaskRecordQuerySet:
        """Pending tasks whose run_after has passed, in claim order."""
        qs = self.filter(status=TaskStatus.PENDING).filter(
            Q(run_after__isnull=True) | Q(run_after__lte=now)
        )
        if queues:
            qs = qs.filter(queue__in=queues)
        return qs.order_by(*CLAIM_ORDER)

    def newest_first(self) -> TaskRecordQuerySet:
        return self.order_by("-created_at", "-id")

    def queue_counts(self) -> models.QuerySet[Any, QueueCountRow]:
        """Per queue, live status and worker: how many tasks, how many ran before, the oldest."""
        return (
            self.filter(status__in=[TaskStatus.PENDING, TaskStatus.RUNNING])
            .order_by()
            .values("queue", "status", "worker_id")
            .annotate(
                count=Count("id"),
                oldest=Min("created_at"),
                retrying=Count("id", filter=Q(attempts__gte=1)),
            )
        )

    def ended_counts(self, since: Sequence[datetime]) -> models.QuerySet[TaskRecord, Any]:
        """Per queue and status, COMPLETED and FAILED records that ended since each instant.

        One range of the ``workers_task_ended`` index per status, from the earliest
        instant: ``n0``, ``n1``, ... count the records that ended at or after each.
        """
        return (
            self.filter(
                status__in=[TaskStatus.COMPLETED, TaskStatus.FAILED],
                finished_at__gte=min(since),
            )
            .order_by()
            .values("queue", "status")
            .annotate(
                **{
                    f"n{i}": Count("id", filter=Q(finished_at__gte=instant))
                    for i, instant in enumerate(since)
                }
            )
        )

    def finished_before(self, status: TaskStatus, before: datetime) -> TaskRecordQuerySet:
        """Records of a terminal ``status`` that finished before ``before`` (retention).

        A workflow's nodes are left out: they go with their workflow.
        """
        return self.filter(status=status, finished_at__lt=before, workflow__isnull=True)


class TaskRecord(models.Model):
    """One task id and the state of its current run."""

    id = models.CharField(primary_key=True, max_length=TASK_ID_MAX_LENGTH)
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    # The owner half of a user-scoped id (derived, never edited); null for global ids.
    owner = models.CharField(max_length=OWNER_MAX_LENGTH, null=True, blank=True)
    scope = models.CharField(max_length=8, default="user")
    task_path = models.CharField(max_length=TASK_PATH_MAX_LENGTH)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, default="default")
    priority = models.SmallIntegerField(default=0)
    run_after = models.DateTimeField(null=True, blank=True)
    options = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=TaskStatus.choices, default=TaskStatus.PENDING)
    progress = models.FloatField(default=0.0)
    attempts = models.PositiveIntegerField(default=0)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    # The failures of this run's attempts, oldest first (bounded); ``error`` is the last.
    errors = models.JSONField(default=list, blank=True)
    cancel_reason = models.CharField(
        max_length=12,
        choices=[(r.value, r.value) for r in CancelReason],
        default=CancelReason.NONE,
    )
    # Identity of the current run: terminal writes are fenced on it.
    run_id = models.CharField(max_length=32)
    worker_id = models.CharField(max_length=WORKER_ID_MAX_LENGTH, null=True, blank=True)
    workflow = models.CharField(max_length=200, null=True, blank=True)
    # A node's name, or its undo's label (the name and ":undo").
    node = models.CharField(max_length=NODE_LABEL_MAX_LENGTH, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TaskRecordQuerySet.as_manager()

    class Meta:
        verbose_name = "task"
        ordering = ("-created_at", "-id")
        indexes = (
            # The claim, in its exact order: over all queues, and within given queues.
            # PENDING rows only, so the finished history never enters these indexes.
            # ``status`` stays the first column: where a database has no partial
            # indexes (MariaDB, MySQL) the condition is dropped and the same index is
            # still the claim's (see ``check`` below).
            models.Index(
                fields=("status", *CLAIM_ORDER),
                name="workers_task_pending",
                condition=Q(status=TaskStatus.PENDING),
            ),
            PendingQueueIndex(
                fields=("status", "queue", *CLAIM_ORDER),
                name="workers_task_pending_queue",
                condition=Q(status=TaskStatus.PENDING),
            ),
            # A fair queue's owners and each one's next tasks (global tasks, owner NULL,
            # as one more owner). With run_after (PostgreSQL), it answers an owner's
            # read alone, so the planner never prefers the claim-order index above.
            PendingQueueIndex(
                fields=("status", "queue", "owner", *CLAIM_ORDER),
                include=("run_after",),
                name="workers_task_pending_owner",
                condition=Q(status=TaskStatus.PENDING),
            ),
            # Listing an owner's tasks newest first. Like the two below, it holds only
            # the rows its queries can ask for, so a write of any other row (a global
            # task's, a plain task's, an unfinished one's) costs it nothing: every
            # status change writes each index that holds the row.
            models.Index(
                fields=("owner", "-created_at"),
                name="workers_task_owner_list",
                condition=Q(owner__isnull=False),
            ),
            models.Index(fields=("-created_at", "-id"), name="workers_task_created"),
            # Retention deletes finished tasks by age.
            models.Index(
                fields=("status", "finished_at"),
                name="workers_task_ended",
                condition=Q(finished_at__isnull=False),
            ),
            # A workflow's nodes and undos.
            models.Index(
                fields=("workflow",),
                name="workers_task_nodes",
                condition=Q(workflow__isnull=False),
            ),
            # The RUNNING records of a queue: what a claim of a concurrency-limited queue
            # counts. Without it that count read the whole table on every such claim.
            models.Index(
                fields=("status", "queue"),
                name="workers_task_running",
                condition=Q(status=TaskStatus.RUNNING),
            ),
        )
        permissions = (("manage_all_tasks", "Can see and cancel every task"),)

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    @classmethod
    def check(cls, **kwargs: Any) -> list[checks.CheckMessage]:
        # Django warns where an index condition (models.W037) or included column
        # (models.W040) is ignored; the indexes are meant to work without them.
        return [m for m in super().check(**kwargs) if m.id not in ("models.W037", "models.W040")]


class WorkflowRecordQuerySet(models.QuerySet["WorkflowRecord"]):
    """Named queries over workflows."""

    def newest_first(self) -> WorkflowRecordQuerySet:
        return self.order_by("-created_at", "-id")

    def in_state(self, shown: str) -> WorkflowRecordQuerySet:
        """Workflows a reader sees in the state ``shown`` (``cancelling`` included)."""
        from django_workers.engine.records import state_columns

        match = models.Q(pk__in=[])
        for columns in state_columns(shown):
            match |= models.Q(
                *(
                    models.Q(**{f"{c}__isnull": True}) if v is None else models.Q(**{c: v})
                    for c, v in columns.items()
                )
            )
        return self.filter(match)

    def overdue(self, now: datetime) -> WorkflowRecordQuerySet:
        """Running workflows past their deadline that no cancel has reached yet."""
        return self.filter(state="running", deadline_at__lte=now, cancel_undo__isnull=True)


class WorkflowRecord(models.Model):
    """One workflow: its plan's hash, its state, and where each node is.

    Its nodes are task records (``TaskRecord.workflow`` is this id); ``nodes``
    holds the state machine's view of them and each node's undo call. Every
    change locks this row (``select_for_update``) in the transaction that ends
    one of its task records.
    """

    id = models.CharField(primary_key=True, max_length=TASK_ID_MAX_LENGTH)
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    owner = models.CharField(max_length=OWNER_MAX_LENGTH, null=True, blank=True)
    state = models.CharField(max_length=20, default="running")
    plan_hash = models.CharField(max_length=64)
    fail_fast = models.BooleanField(default=False)
    undo_on_cancel = models.BooleanField(default=True)
    # The machine's flags: whether an unabsorbed failure came first, and the accepted
    # cancel's undo choice (null: never cancelled).
    unabsorbed_failure = models.BooleanField(default=False)
    cancel_undo = models.BooleanField(null=True, blank=True)
    outcome = models.CharField(max_length=10, null=True, blank=True)
    nodes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # How many times the nodes have been run: 1, and one more for each re-run.
    runs = models.PositiveIntegerField(default=1)
    # Why the accepted cancel came: ``user`` or ``deadline`` (null: never cancelled).
    cancel_reason = models.CharField(max_length=12, null=True, blank=True)
    # The deadline in seconds as submitted, and when the current run passes it (null: none).
    deadline = models.FloatField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    # The identities granted read and cancel at submit, besides the owner; every
    # record of its nodes and undo steps is given the same watchers.
    watchers = models.JSONField(default=list, blank=True)

    objects = WorkflowRecordQuerySet.as_manager()

    class Meta:
        verbose_name = "workflow"
        ordering = ("-created_at", "-id")
        indexes = (
            models.Index(fields=("owner", "-created_at"), name="workers_workflow_owner"),
            models.Index(fields=("-created_at", "-id"), name="workers_workflow_created"),
            models.Index(fields=("state", "finished_at"), name="workers_workflow_finished"),
            # The deadline sweep: running workflows whose deadline has passed.
            models.Index(fields=("state", "deadline_at"), name="workers_workflow_deadline"),
        )

    def __str__(self) -> str:
        return f"{self.id} ({self.state})"


class TaskWatcher(models.Model):
    """An identity (besides the owner) that may read, list and cancel a task."""

    task = models.ForeignKey(TaskRecord, on_delete=models.CASCADE, related_name="watcher_rows")
    user_id = models.CharField(max_length=OWNER_MAX_LENGTH)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=("task", "user_id"), name="workers_watcher_unique"),
        )
        indexes = (models.Index(fields=("user_id",), name="workers_watcher_user"),)

    def __str__(self) -> str:
        return f"{self.user_id} watches {self.task_id}"


class WorkerProcess(models.Model):
    """A running runtime's lease: it is alive while its heartbeat is fresh."""

    id = models.CharField(primary_key=True, max_length=WORKER_ID_MAX_LENGTH)
    host = models.CharField(max_length=HOST_MAX_LENGTH)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list, blank=True)
    concurrency = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    # How the runtime learns of new work ("LISTEN/NOTIFY", "polling every 0.2 s", ...).
    wake_up = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        verbose_name = "worker process"
        verbose_name_plural = "worker processes"
        indexes = (models.Index(fields=("heartbeat_at",), name="workers_process_heartbeat"),)

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"


class HeldSlot(models.Model):
    """A run whose record ended while its function still executes: it keeps its slot.

    Written in the transaction that ends a RUNNING record from outside the run (a
    cancel, a timeout); deleted by the run's worker once the function returns, or by
    the zombie sweep when that worker is dead. Queue limits count these as running.
    """

    run_id = models.CharField(primary_key=True, max_length=32)
    task_id = models.CharField(max_length=TASK_ID_MAX_LENGTH)
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH)
    worker_id = models.CharField(max_length=WORKER_ID_MAX_LENGTH)
    held_since = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = (
            models.Index(fields=("queue",), name="workers_slot_queue"),
            models.Index(fields=("worker_id",), name="workers_slot_worker"),
        )

    def __str__(self) -> str:
        return f"{self.task_id} ({self.run_id}) holds a slot of {self.queue}"


class QueueLock(models.Model):
    """One row per concurrency-limited queue, locked while claiming from it."""

    name = models.CharField(primary_key=True, max_length=QUEUE_MAX_LENGTH)

    def __str__(self) -> str:
        return self.name


def record_fields() -> list[str]:
    """Columns a TaskInfo is built from (watchers come from their own table)."""
    return [f.attname for f in TaskRecord._meta.concrete_fields]


class ScheduleRecordQuerySet(models.QuerySet["ScheduleRecord"]):
    """Named queries and the conditional writes of periodic schedules."""

    def advance(self, key: str, expected: datetime | None, tick: datetime, task_id: str) -> bool:
        """Record ``tick`` as enqueued if the last tick is still ``expected`` and not paused."""
        qs = self.filter(pk=key, paused=False)
        if expected is None:
            qs = qs.filter(last_tick__isnull=True)
        else:
            qs = qs.filter(last_tick=expected)
        return qs.update(last_tick=tick, last_task_id=task_id) == 1

    def set_paused(self, keys: list[str], paused: bool, now: datetime) -> int:
        """Pause or resume schedules; a resumed one fires only ticks after ``now``."""
        changes: dict[str, Any] = {"paused": paused}
        if not paused:
            changes["fires_after"] = now
        return self.filter(pk__in=keys, paused=not paused).update(**changes)


class ScheduleRecord(models.Model):
    """A periodic schedule as the workers last saw it declared, and its last tick.

    The declaration lives in code; this row mirrors it for the admin and the
    ``workers`` command, holds the pause switch, and records the last tick
    enqueued. Every scheduler advances ``last_tick`` with one conditional
    UPDATE, and only the one whose UPDATE matched submits that tick.
    """

    key = models.CharField(primary_key=True, max_length=100)
    task_path = models.CharField(max_length=TASK_PATH_MAX_LENGTH)
    cron = models.CharField(max_length=CRON_MAX_LENGTH, blank=True, default="")
    every = models.PositiveIntegerField(null=True, blank=True)
    time_zone = models.CharField(max_length=TIME_ZONE_MAX_LENGTH, default="UTC")
    catch_up = models.CharField(max_length=8, default="latest")
    owner = models.CharField(max_length=OWNER_MAX_LENGTH, null=True, blank=True)
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, null=True, blank=True)
    # As declared in code; a schedule fires when enabled and not paused.
    enabled = models.BooleanField(default=True)
    # The operators' switch (admin): a paused schedule fires nothing.
    paused = models.BooleanField(default=False)
    # Ticks at or before this instant never fire: when the row was created or re-enabled.
    fires_after = models.DateTimeField(default=timezone.now)
    last_tick = models.DateTimeField(null=True, blank=True)
    last_task_id = models.CharField(max_length=TASK_ID_MAX_LENGTH, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ScheduleRecordQuerySet.as_manager()

    class Meta:
        verbose_name = "schedule"
        ordering = ("key",)

    def __str__(self) -> str:
        return self.key
