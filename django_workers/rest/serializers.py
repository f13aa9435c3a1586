"""JSON shapes of the API: task and workflow snapshots, list pages, their queries, an error."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_workers.api import MAX_LIMIT
from django_workers.authority import SCOPES
from django_workers.bounds import QUEUE_MAX_LENGTH
from django_workers.cancellation import CancelReason
from django_workers.engine.machine import NodeStatus, UndoStatus
from django_workers.info import TaskStatus
from django_workers.workflows.handles import STATES as WORKFLOW_STATES

#: The deepest page a list may ask for; paging further is a scan, not a lookup.
MAX_OFFSET = 10_000
DEFAULT_LIMIT = 100

#: How a page number is written: ASCII digits, maybe a minus (then refused as out of range) and
#: ".0" (an integer to JSON Schema, so the OpenAPI schema's integers include 100.0).
PAGE_NUMBER = re.compile(r"-?[0-9]+(?:\.0+)?")


class TaskFailureSerializer(serializers.Serializer[Any]):
    """How a run failed: the exception's dotted type, its message and traceback."""

    type = serializers.CharField(read_only=True)
    message = serializers.CharField(read_only=True)
    traceback = serializers.CharField(read_only=True)


class TaskSerializer(serializers.Serializer[Any]):
    """A ``TaskInfo`` snapshot; timestamps in ISO 8601."""

    id = serializers.CharField(read_only=True)
    key = serializers.CharField(read_only=True)
    owner = serializers.CharField(read_only=True, allow_null=True)
    scope = serializers.ChoiceField(choices=SCOPES, read_only=True)
    queue = serializers.CharField(read_only=True)
    priority = serializers.IntegerField(read_only=True)
    status = serializers.ChoiceField(choices=TaskStatus.choices, read_only=True)
    progress = serializers.FloatField(read_only=True)
    attempts = serializers.IntegerField(read_only=True)
    max_attempts = serializers.IntegerField(
        read_only=True, help_text="Its first attempt and its retries."
    )
    retrying = serializers.BooleanField(
        read_only=True,
        help_text="PENDING after a failed (or lost) attempt: attempt attempts + 1 starts at "
        "run_after.",
    )
    # Any JSON, null included (a bare schema accepts null; "nullable" would make it ambiguous).
    result = serializers.JSONField(read_only=True)
    error = TaskFailureSerializer(read_only=True, allow_null=True)
    # The metaclass takes declared fields off the class, so Serializer.errors stays intact
    # (the checker sees a field replace the errors property).
    errors = TaskFailureSerializer(many=True, read_only=True)  # type: ignore[assignment]
    cancel_reason = serializers.ChoiceField(choices=list(CancelReason), read_only=True)
    run_id = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)
    run_after = serializers.DateTimeField(read_only=True, allow_null=True)
    watchers = serializers.ListField(child=serializers.CharField(), read_only=True)
    workflow = serializers.CharField(read_only=True, allow_null=True)
    node = serializers.CharField(read_only=True, allow_null=True)


class TaskPageSerializer(serializers.Serializer[Any]):
    """One page of the caller's tasks, newest first, and the paging that chose it."""

    offset = serializers.IntegerField(read_only=True)
    limit = serializers.IntegerField(read_only=True)
    results = TaskSerializer(many=True, read_only=True)


class PageNumberField(serializers.IntegerField):
    """An offset or a limit in digits: DRF's int() would also read '1_000', ' 7', '+7' or '٣'."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str) and not PAGE_NUMBER.fullmatch(data):
            self.fail("invalid")
        return int(super().to_internal_value(data))


@extend_schema_field(
    {"type": "string", "maxLength": QUEUE_MAX_LENGTH, "pattern": r"^(?:[^\p{C}\p{Z}]| )*$"}
)
class QueueNameField(serializers.CharField):
    """A queue to filter by: printable (``str.isprintable``), as every queue's name is."""

    def to_internal_value(self, data: Any) -> str:
        value = str(super().to_internal_value(data))
        if not value.isprintable():
            raise serializers.ValidationError("A queue name holds printable characters only.")
        return value


class TaskListQuerySerializer(serializers.Serializer[Any]):
    """The list's query parameters; an unknown status or an out-of-range page is refused."""

    status = serializers.ChoiceField(choices=TaskStatus.choices, required=False)
    queue = QueueNameField(required=False, max_length=QUEUE_MAX_LENGTH, trim_whitespace=False)
    offset = PageNumberField(min_value=0, max_value=MAX_OFFSET, default=0)
    limit = PageNumberField(min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


class UndoSerializer(serializers.Serializer[Any]):
    """A node's compensation step; its task id is null until the undo is queued."""

    state = serializers.ChoiceField(choices=list(UndoStatus), read_only=True)
    task_path = serializers.CharField(read_only=True)
    queue = serializers.CharField(read_only=True)
    task_id = serializers.CharField(read_only=True, allow_null=True)
    reason = serializers.CharField(read_only=True, allow_null=True)


class WorkflowNodeSerializer(serializers.Serializer[Any]):
    """One node: its state, dependencies and task; the size of its result, never the result."""

    name = serializers.CharField(read_only=True)
    state = serializers.ChoiceField(choices=list(NodeStatus), read_only=True)
    deps = serializers.ListField(child=serializers.CharField(), read_only=True)
    always = serializers.BooleanField(read_only=True)
    queue = serializers.CharField(read_only=True)
    task_id = serializers.CharField(read_only=True)
    reason = serializers.CharField(read_only=True, allow_null=True)
    result_size = serializers.IntegerField(read_only=True, allow_null=True)
    undo = UndoSerializer(read_only=True, allow_null=True)


class WorkflowSerializer(serializers.Serializer[Any]):
    """A ``WorkflowInfo`` snapshot, its nodes in the order they were added."""

    id = serializers.CharField(read_only=True)
    key = serializers.CharField(read_only=True)
    owner = serializers.CharField(read_only=True, allow_null=True)
    state = serializers.ChoiceField(choices=WORKFLOW_STATES, read_only=True)
    fail_fast = serializers.BooleanField(read_only=True)
    undo_on_cancel = serializers.BooleanField(read_only=True)
    plan_hash = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)
    #: How many times its nodes have been run: 1, plus one per re-run.
    runs = serializers.IntegerField(read_only=True)
    #: Why the accepted cancel came (``user`` or ``deadline``); null if never cancelled.
    cancel_reason = serializers.CharField(read_only=True, allow_null=True)
    #: When the current run is cancelled for its deadline; null if it has none.
    deadline_at = serializers.DateTimeField(read_only=True, allow_null=True)
    watchers = serializers.ListField(child=serializers.CharField(), read_only=True)
    nodes = WorkflowNodeSerializer(many=True, read_only=True)


class WorkflowPageSerializer(serializers.Serializer[Any]):
    """One page of the caller's workflows, newest first, and the paging that chose it."""

    offset = serializers.IntegerField(read_only=True)
    limit = serializers.IntegerField(read_only=True)
    results = WorkflowSerializer(many=True, read_only=True)


class WorkflowListQuerySerializer(serializers.Serializer[Any]):
    """The workflow list's query parameters; an unknown state or an out-of-range page is refused."""

    state = serializers.ChoiceField(choices=WORKFLOW_STATES, required=False)
    offset = PageNumberField(min_value=0, max_value=MAX_OFFSET, default=0)
    limit = PageNumberField(min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


#: Why ``undo=true`` is refused: a cancel may drop the compensation chosen at submit, never add it.
UNDO_ONLY_NARROWS = (
    "undo=true is refused: a cancel may only narrow the undo_on_cancel the workflow was "
    "submitted with. Leave undo out to compensate as submitted, or send undo=false to "
    "cancel without compensation."
)


class WorkflowCancelQuerySerializer(serializers.Serializer[Any]):
    """The cancel's parameters: ``undo=false`` skips compensation; absent keeps the default."""

    # allow_null makes an absent or empty value None, not the False of an unticked checkbox.
    undo = serializers.BooleanField(required=False, allow_null=True, default=None)
    #: With undo=false: drop the compensation an earlier cancel asked for.
    drop_undo = serializers.BooleanField(required=False, default=False)

    def validate_undo(self, undo: bool | None) -> bool | None:
        if undo is True:
            raise serializers.ValidationError(UNDO_ONLY_NARROWS)
        return undo


class WorkflowRerunQuerySerializer(serializers.Serializer[Any]):
    """The re-run's parameter: the plan hash the caller read, so another plan is never re-run."""

    plan_hash = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        required=False,
        default=None,
        error_messages={"invalid": "plan_hash is the 64 hex digits of the workflow's plan_hash."},
    )


class ErrorSerializer(serializers.Serializer[Any]):
    """Every error answer: a stable code and a message for people."""

    error = serializers.CharField(read_only=True)
    detail = serializers.CharField(read_only=True)
