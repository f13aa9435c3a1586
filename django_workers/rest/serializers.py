"""JSON shapes of the API: a task snapshot, the list page, its query, an error."""

from __future__ import annotations

from rest_framework import serializers

from django_workers.api import MAX_LIMIT
from django_workers.authority import SCOPES
from django_workers.cancellation import CancelReason
from django_workers.info import TaskStatus
from django_workers.submission import QUEUE_MAX_LENGTH

#: The deepest page a list may ask for; paging further is a scan, not a lookup.
MAX_OFFSET = 10_000
DEFAULT_LIMIT = 100


class TaskFailureSerializer(serializers.Serializer):
    """How a run failed: the exception's dotted type, its message and traceback."""

    type = serializers.CharField(read_only=True)
    message = serializers.CharField(read_only=True)
    traceback = serializers.CharField(read_only=True)


class TaskSerializer(serializers.Serializer):
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
    # Any JSON, null included (a bare schema accepts null; "nullable" would make it ambiguous).
    result = serializers.JSONField(read_only=True)
    error = TaskFailureSerializer(read_only=True, allow_null=True)
    # The metaclass takes declared fields off the class, so Serializer.errors stays intact.
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


class TaskPageSerializer(serializers.Serializer):
    """One page of the caller's tasks, newest first, and the paging that chose it."""

    offset = serializers.IntegerField(read_only=True)
    limit = serializers.IntegerField(read_only=True)
    results = TaskSerializer(many=True, read_only=True)


class TaskListQuerySerializer(serializers.Serializer):
    """The list's query parameters; an unknown status or an out-of-range page is refused."""

    status = serializers.ChoiceField(choices=TaskStatus.choices, required=False)
    queue = serializers.CharField(
        required=False, max_length=QUEUE_MAX_LENGTH, trim_whitespace=False
    )
    offset = serializers.IntegerField(min_value=0, max_value=MAX_OFFSET, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


class ErrorSerializer(serializers.Serializer):
    """Every error answer: a stable code and a message for people."""

    error = serializers.CharField(read_only=True)
    detail = serializers.CharField(read_only=True)
