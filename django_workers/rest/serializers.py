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
from django_workers.lifecycle import ERRORS_KEPT
from django_workers.workflows.handles import STATES as WORKFLOW_STATES

#: The deepest page a list may ask for; paging further is a scan, not a lookup.
MAX_OFFSET = 10_000
DEFAULT_LIMIT = 100

#: How a page number is written: ASCII digits, maybe a minus (then refused as out of range) and
#: ".0" (an integer to JSON Schema, so the OpenAPI schema's integers include 100.0).
PAGE_NUMBER = re.compile(r"-?[0-9]+(?:\.0+)?")


class TaskFailureSerializer(serializers.Serializer[Any]):
    """How a run failed: the exception's dotted type, its message and traceback."""

    type = serializers.CharField(read_only=True, help_text="The exception's dotted class name.")
    message = serializers.CharField(read_only=True)
    traceback = serializers.CharField(read_only=True)


class TaskSerializer(serializers.Serializer[Any]):
    """A ``TaskInfo`` snapshot; timestamps in ISO 8601."""

    id = serializers.CharField(
        read_only=True, help_text="The id submit_task returned: `<user id>::<key>` for a user task."
    )
    key = serializers.CharField(read_only=True, help_text="The key it was submitted under.")
    owner = serializers.CharField(
        read_only=True, allow_null=True, help_text="The owner's user id; null for a global task."
    )
    scope = serializers.ChoiceField(choices=SCOPES, read_only=True)
    queue = serializers.CharField(read_only=True)
    priority = serializers.IntegerField(read_only=True)
    status = serializers.ChoiceField(choices=TaskStatus.choices, read_only=True)
    progress = serializers.FloatField(read_only=True, help_text="0 to 100; 100 once completed.")
    attempts = serializers.IntegerField(
        read_only=True, help_text="Attempts started so far (1 during the first)."
    )
    max_attempts = serializers.IntegerField(
        read_only=True, help_text="Its first attempt and its retries."
    )
    retrying = serializers.BooleanField(
        read_only=True,
        help_text="PENDING after a failed (or lost) attempt: attempt attempts + 1 starts at "
        "run_after.",
    )
    # Any JSON, null included (a bare schema accepts null; "nullable" would make it ambiguous).
    result = serializers.JSONField(
        read_only=True, help_text="The task's JSON result once it completed, else null."
    )
    error = TaskFailureSerializer(
        read_only=True,
        allow_null=True,
        help_text="The last failure (once failed or cancelled, or while a retry waits); else null.",
    )
    # The metaclass takes declared fields off the class, so Serializer.errors stays intact
    # (the checker sees a field replace the errors property).
    errors = TaskFailureSerializer(  # type: ignore[assignment]
        many=True,
        read_only=True,
        help_text="Every failed attempt of the current run, oldest first (the last "
        f"{ERRORS_KEPT} are kept).",
    )
    cancel_reason = serializers.ChoiceField(
        choices=list(CancelReason), read_only=True, help_text="`none`, or why it was stopped."
    )
    run_id = serializers.CharField(
        read_only=True, help_text="The current run; a re-run of the id gets a new one."
    )
    created_at = serializers.DateTimeField(read_only=True)
    started_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When the run's first attempt started; retries keep it, and the timeout "
        "counts from it. Null before a worker starts it.",
    )
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)
    run_after = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="Not run before this time."
    )
    watchers = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="The user ids that may see it, owner first.",
    )
    workflow = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="For a workflow's node: the workflow id; null for a plain task.",
    )
    node = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="For a workflow's node: its name (`<name>:undo` for its undo); else null.",
    )


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


#: What the schema says of ``offset`` and ``limit``.
PAGE_NUMBER_TEXT = "ASCII digits (`3`, or `3.0`): a sign, a space or `3_000` is refused."


class TaskListQuerySerializer(serializers.Serializer[Any]):
    """The list's query parameters; an unknown status or an out-of-range page is refused."""

    status = serializers.ChoiceField(
        choices=TaskStatus.choices, required=False, help_text="Only tasks in this status."
    )
    queue = QueueNameField(
        required=False,
        max_length=QUEUE_MAX_LENGTH,
        trim_whitespace=False,
        help_text="Only tasks of this queue.",
    )
    offset = PageNumberField(
        min_value=0, max_value=MAX_OFFSET, default=0, help_text=PAGE_NUMBER_TEXT
    )
    limit = PageNumberField(
        min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT, help_text=PAGE_NUMBER_TEXT
    )


class UndoSerializer(serializers.Serializer[Any]):
    """A node's compensation step; its task id is null until the undo is queued."""

    state = serializers.ChoiceField(
        choices=list(UndoStatus),
        read_only=True,
        help_text="`idle` until compensation needs it, then the states of a node.",
    )
    task_path = serializers.CharField(read_only=True, help_text="The undo task's dotted path.")
    queue = serializers.CharField(read_only=True)
    task_id = serializers.CharField(read_only=True, allow_null=True)
    reason = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="Why it did not complete: its error's message or its cancel reason.",
    )


class WorkflowNodeSerializer(serializers.Serializer[Any]):
    """One node: its state, dependencies and task; the size of its result, never the result."""

    name = serializers.CharField(read_only=True)
    state = serializers.ChoiceField(
        choices=list(NodeStatus),
        read_only=True,
        help_text="`waiting` for its dependencies, `pending` in its queue, then running and ended.",
    )
    deps = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="The nodes it runs after."
    )
    always = serializers.BooleanField(
        read_only=True,
        help_text="Runs even if a dependency failed or was cancelled.",
    )
    queue = serializers.CharField(read_only=True)
    task_id = serializers.CharField(
        read_only=True, help_text="Its task: read its result at `GET tasks/{task_id}/`."
    )
    reason = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="Why it did not complete: its error's message or its cancel reason; else null.",
    )
    result_size = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="The size in bytes of its JSON result once it completed; else null.",
    )
    undo = UndoSerializer(
        read_only=True, allow_null=True, help_text="Its compensation step, or null."
    )


class WorkflowSerializer(serializers.Serializer[Any]):
    """A ``WorkflowInfo`` snapshot, its nodes in the order they were added."""

    id = serializers.CharField(read_only=True)
    key = serializers.CharField(read_only=True)
    owner = serializers.CharField(read_only=True, allow_null=True)
    state = serializers.ChoiceField(
        choices=WORKFLOW_STATES,
        read_only=True,
        help_text="`running`, then its end; `cancelling` or `compensating` while a cancel or its "
        "undo steps are under way.",
    )
    fail_fast = serializers.BooleanField(read_only=True)
    undo_on_cancel = serializers.BooleanField(
        read_only=True,
        help_text="Whether a cancel undoes completed steps unless it says otherwise (fixed at "
        "submit).",
    )
    plan_hash = serializers.CharField(
        read_only=True, help_text="The hash of its plan: send it with a re-run."
    )
    created_at = serializers.DateTimeField(read_only=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)
    runs = serializers.IntegerField(
        read_only=True, help_text="How many times its nodes have been run: 1, plus one per re-run."
    )
    cancel_reason = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="Why the accepted cancel came: `user` or `deadline`; null if never cancelled.",
    )
    deadline_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When the current run is cancelled for its deadline (from submit or the last "
        "re-run); null without one.",
    )
    watchers = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="The user ids that may see it, owner first.",
    )
    nodes = WorkflowNodeSerializer(many=True, read_only=True)


class WorkflowPageSerializer(serializers.Serializer[Any]):
    """One page of the caller's workflows, newest first, and the paging that chose it."""

    offset = serializers.IntegerField(read_only=True)
    limit = serializers.IntegerField(read_only=True)
    results = WorkflowSerializer(many=True, read_only=True)


class WorkflowListQuerySerializer(serializers.Serializer[Any]):
    """The workflow list's query parameters; an unknown state or an out-of-range page is refused."""

    state = serializers.ChoiceField(
        choices=WORKFLOW_STATES, required=False, help_text="Only workflows in this state."
    )
    offset = PageNumberField(
        min_value=0, max_value=MAX_OFFSET, default=0, help_text=PAGE_NUMBER_TEXT
    )
    limit = PageNumberField(
        min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT, help_text=PAGE_NUMBER_TEXT
    )


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
        help_text="The plan_hash you read: the workflow is re-run only if its plan still has it.",
        error_messages={"invalid": "plan_hash is the 64 hex digits of the workflow's plan_hash."},
    )


class ErrorSerializer(serializers.Serializer[Any]):
    """Every error answer: a stable code and a message for people."""

    error = serializers.CharField(read_only=True, help_text="A stable code, such as `not_found`.")
    detail = serializers.CharField(read_only=True, help_text="What went wrong, for people.")
