"""The task pages: a scoped list with progress bars, a read-only page, cancelling by cancel_task."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from django_workers import clock, visibility
from django_workers.admin.base import (
    EMPTY,
    OwnerFilter,
    ReadOnlyAdmin,
    badge,
    cancel_each,
    could_be_id,
    is_active_staff,
    name_owners,
    report,
    selected_ids,
    user_labels,
)
from django_workers.admin.live import POLL_INTERVAL_MS, live_url
from django_workers.admin.retrying import may_retry, retry_selected, retry_url
from django_workers.api import cancel_task
from django_workers.authority import user_id_of
from django_workers.exceptions import TaskAlreadyFinished, TaskNotFound
from django_workers.info import TERMINAL_STATUSES, TaskStatus
from django_workers.models import TaskRecord
from django_workers.options import TaskOptions
from django_workers.web_authority import authority_for_user

#: The task page, every field read-only: (heading, fields) in the order shown.
FIELD_GROUPS: tuple[tuple[str | None, tuple[str, ...]], ...] = (
    (None, ("id", "key", "owner_display", "scope", "watchers_display")),
    (
        "Run",
        (
            "status_display",
            "progress_display",
            "attempts_display",
            "cancel_reason",
            "created_at",
            "run_after",
            "started_at",
            "finished_at",
            "duration_display",
            "worker_id",
            "run_id",
        ),
    ),
    ("Call", ("task_path", "args_display", "kwargs_display", "queue", "priority")),
    ("Options", ("options_display",)),
    ("Outcome", ("result_display", "error_display", "errors_display")),
    ("Workflow", ("workflow_display", "node")),
)
READ_ONLY_FIELDS = [field for _name, fields in FIELD_GROUPS for field in fields]


def format_seconds(seconds: float) -> str:
    """A short human duration: "850 ms", "4.2 s", "3 min 5 s", "2 h 10 min"."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def task_duration(started_at: datetime | None, finished_at: datetime | None) -> timedelta | None:
    """How long a run took, or has been running for; None before it starts."""
    if started_at is None:
        return None
    return (finished_at or clock.now()) - started_at


def progress_bar(progress: float) -> str:
    """A small bar for a 0-100 progress, with the figure beside it."""
    pct = max(0.0, min(100.0, progress))
    return format_html(
        '<progress class="dw-progress" value="{}" max="100" title="{}%">{}%</progress> {}%',
        f"{pct:g}",
        f"{pct:g}",
        f"{pct:g}",
        f"{pct:.0f}",
    )


def pretty_json(value: Any) -> str:
    """JSON shown as indented, escaped text."""
    if value is None:
        return EMPTY
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True, default=str))


class TaskPathFilter(admin.SimpleListFilter):
    """The task paths of the tasks the viewer may see."""

    title = "task"
    parameter_name = "task_path"
    #: Most paths offered; beyond that, search.
    MOST = 50

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        visible = model_admin.get_queryset(request).order_by("task_path")
        paths = visible.values_list("task_path", flat=True).distinct()[: self.MOST]
        return [(task_path, task_path) for task_path in paths]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(task_path=self.value()) if self.value() else queryset


@admin.register(TaskRecord)
class TaskRecordAdmin(ReadOnlyAdmin[TaskRecord]):
    """Tasks the signed-in user may see; a Cancel button and a "Cancel selected" action."""

    list_display = (
        "id",
        "owner_display",
        "queue",
        "status_display",
        "task_path",
        "progress_display",
        "attempts_display",
        "duration_display",
        "created_at",
    )
    list_filter = (
        "status",
        "queue",
        ("created_at", admin.DateFieldListFilter),
        OwnerFilter,
        TaskPathFilter,
    )
    search_fields = ("id", "key", "owner")
    ordering = ("-created_at", "-id")
    actions = ("cancel_selected", retry_selected)
    fieldsets = [(name, {"fields": fields}) for name, fields in FIELD_GROUPS]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return list(READ_ONLY_FIELDS)

    # -- who sees what --

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_active_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Any staff user may look; get_queryset narrows what they see.
        return is_active_staff(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskRecord]:
        user_id = user_id_of(authority_for_user(request.user))
        return TaskRecord.objects.filter(visibility.tasks(user_id))

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        task = self._visible_task(request, object_id)
        context = {
            **(extra_context or {}),
            "can_cancel": task.status not in TERMINAL_STATUSES,
            "can_retry": may_retry(request, task),
            "live_interval": POLL_INTERVAL_MS,
        }
        return super().change_view(request, object_id, form_url, context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._visible_task(request, object_id)
        return super().history_view(request, object_id, extra_context)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        name_owners(changelist.result_list, request, self.admin_site)
        return changelist

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> TaskRecord | None:
        task = super().get_object(request, object_id, from_field)
        if task is None:
            return None
        grants = task.watcher_rows.order_by("user_id").values_list("user_id", flat=True)
        # As the API lists them: the owner first, then the grants.
        watchers = [*([task.owner] if task.owner else []), *(w for w in grants if w != task.owner)]
        labels = user_labels(watchers, request, self.admin_site)
        # The change form's template reads the labels off the object it is given.
        task.owner_label = labels.get(task.owner) if task.owner else None  # type: ignore[attr-defined]
        task.watcher_labels = [labels[w] for w in watchers]  # type: ignore[attr-defined]
        return task

    def _visible_task(self, request: HttpRequest, object_id: str) -> TaskRecord:
        """The task, or 404 when it is missing or not visible (the two look alike)."""
        task_id = unquote(object_id)
        if not could_be_id(task_id):
            raise Http404
        return get_object_or_404(self.get_queryset(request), pk=task_id)

    # -- cancelling, through the public API --

    def get_urls(self) -> list[URLPattern]:
        opts = self.opts
        cancel = path(
            "<path:object_id>/cancel/",
            self.admin_site.admin_view(require_POST(self.cancel_view)),
            name=f"{opts.app_label}_{opts.model_name}_cancel",
        )
        return [cancel, retry_url(self), live_url(self, task_now), *super().get_urls()]

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Cancel one task with the user's authority; report and go back to its page."""
        task_id = unquote(object_id)
        if not self.has_view_permission(request) or not could_be_id(task_id):
            raise Http404
        outcome = _cancel(task_id, request)
        if outcome is None:
            raise Http404
        self.message_user(request, *outcome)
        opts = self.opts
        return HttpResponseRedirect(
            reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(task_id)])
        )

    @admin.action(description="Cancel selected tasks")
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[TaskRecord]) -> None:
        """Cancel each selected task through cancel_task and report what happened to each."""
        authority = authority_for_user(request.user)

        def cancel(task_id: str) -> str:
            if not could_be_id(task_id):
                raise TaskNotFound(task_id)
            cancel_task(task_id, authority)
            return "Cancelled"

        outcomes = cancel_each(
            selected_ids(request, queryset), cancel, TaskNotFound, TaskAlreadyFinished
        )
        report(self, request, outcomes, "task")

    # -- columns and fields --

    @admin.display(description="owner", ordering="owner")
    def owner_display(self, task: TaskRecord) -> str:
        if task.owner is None:
            return "(global)"
        return getattr(task, "owner_label", None) or task.owner

    @admin.display(description="status", ordering="status")
    def status_display(self, task: TaskRecord) -> str:
        return status_badge(task)

    @admin.display(description="workflow", ordering="workflow")
    def workflow_display(self, task: TaskRecord) -> str:
        """The workflow a node's task belongs to, linked to its page."""
        if not task.workflow:
            return EMPTY
        url = reverse("admin:django_workers_workflowrecord_change", args=[quote(task.workflow)])
        return format_html('<a href="{}">{}</a>', url, task.workflow)

    @admin.display(description="progress", ordering="progress")
    def progress_display(self, task: TaskRecord) -> str:
        return progress_bar(task.progress)

    @admin.display(description="attempts", ordering="attempts")
    def attempts_display(self, task: TaskRecord) -> str:
        """How many attempts of how many; for a retry, which comes next and when."""
        most = TaskOptions.from_json(task.options).retries + 1
        if task.status != TaskStatus.PENDING or task.attempts == 0:
            return f"{task.attempts} of {most}"
        text = f"retrying: attempt {task.attempts + 1} of {most}"
        if task.run_after is None:
            return text
        return f"{text}, next at {timezone.localtime(task.run_after):%Y-%m-%d %H:%M:%S}"

    @admin.display(description="duration")
    def duration_display(self, task: TaskRecord) -> str:
        elapsed = task_duration(task.started_at, task.finished_at)
        return EMPTY if elapsed is None else format_seconds(elapsed.total_seconds())

    @admin.display(description="watchers")
    def watchers_display(self, task: TaskRecord) -> str:
        labels = getattr(task, "watcher_labels", [])
        return format_html_join(", ", "{}", ((label,) for label in labels)) if labels else EMPTY

    @admin.display(description="args")
    def args_display(self, task: TaskRecord) -> str:
        return pretty_json(task.args)

    @admin.display(description="kwargs")
    def kwargs_display(self, task: TaskRecord) -> str:
        return pretty_json(task.kwargs)

    @admin.display(description="options")
    def options_display(self, task: TaskRecord) -> str:
        return pretty_json(task.options)

    @admin.display(description="result")
    def result_display(self, task: TaskRecord) -> str:
        return pretty_json(task.result)

    @admin.display(description="error")
    def error_display(self, task: TaskRecord) -> str:
        return _failure_html(task.error)

    @admin.display(description="earlier attempts' errors")
    def errors_display(self, task: TaskRecord) -> str:
        earlier = earlier_failures(task.errors, task.error)
        if not earlier:
            return EMPTY
        return format_html_join(
            "",
            "<strong>{}</strong>: {}<pre>{}</pre>",
            ((e.get("type", ""), e.get("message", ""), e.get("traceback", "")) for e in earlier),
        )


def task_now(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, object_id: str
) -> dict[str, Any]:
    """A task's status, progress, attempts and duration as its page shows them (``live_url``)."""
    assert isinstance(model_admin, TaskRecordAdmin)
    task = model_admin._visible_task(request, object_id)
    elapsed = task_duration(task.started_at, task.finished_at)
    return {
        "status": task.status,
        # As the page's read-only field shows it: the status's label, and its coloured badge.
        "status_display": task.get_status_display(),
        "status_html": status_badge(task),
        "progress": task.progress,
        "progress_html": progress_bar(task.progress),
        "attempts": task.attempts,
        # As the page's read-only field words it ("2 of 4", "retrying: attempt 3 of 4, ...").
        "attempts_display": model_admin.attempts_display(task),
        "duration": EMPTY if elapsed is None else format_seconds(elapsed.total_seconds()),
        "ended": task.status in TERMINAL_STATUSES,
    }


def earlier_failures(
    errors: list[dict[str, str]] | None, error: dict[str, str] | None
) -> list[dict[str, str]]:
    """The failures before the latest one: ``errors`` ends with ``error``, shown on its own."""
    failures = list(errors or [])
    if failures and error and failures[-1] == error:
        failures.pop()
    return failures


def status_badge(task: TaskRecord) -> str:
    """A task's status as a label in the colours of the workflow picture's states."""
    return badge(task.status.lower(), task.get_status_display())


def _failure_html(error: dict[str, str] | None) -> str:
    if not error:
        return EMPTY
    return format_html(
        "<strong>{}</strong>: {}<pre>{}</pre>",
        error.get("type", ""),
        error.get("message", ""),
        error.get("traceback", ""),
    )


def _cancel(task_id: str, request: HttpRequest) -> tuple[str, int] | None:
    """Cancel as the signed-in user: (message, level), or None when the task is not visible."""
    try:
        cancel_task(task_id, authority_for_user(request.user))
    except TaskNotFound:
        return None
    except TaskAlreadyFinished as e:
        return (
            f"Task {task_id} has already ended ({e.status}); nothing was cancelled.",
            messages.WARNING,
        )
    return f"Task {task_id} was cancelled.", messages.SUCCESS
