"""The Django admin for tasks and worker processes: read-only pages, cancelling through the API.

Every page is scoped by the signed-in user's authority (``web_authority``):
staff see the tasks they own or watch, holders of ``manage_all_tasks`` see all.
A task a user may not see is 404, exactly like one that does not exist. No
page writes a task row: the only change, cancelling, goes through ``cancel_task``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from django_workers import clock, operations
from django_workers.api import cancel_task
from django_workers.authority import user_id_of
from django_workers.exceptions import TaskAlreadyFinished, TaskNotFound
from django_workers.info import TERMINAL_STATUSES
from django_workers.models import ScheduleRecord, TaskRecord, WorkerProcess
from django_workers.periodic.admin import ScheduleRecordAdmin
from django_workers.stores import default_store
from django_workers.web_authority import authority_for_user

EMPTY = "-"

#: The task page, every field read-only: (heading, fields) in the order shown.
FIELD_GROUPS: tuple[tuple[str | None, tuple[str, ...]], ...] = (
    (None, ("id", "key", "owner_display", "scope", "watchers_display")),
    (
        "Run",
        (
            "status",
            "progress_display",
            "attempts",
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
    ("Workflow", ("workflow", "node")),
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


class ReadOnlyAdmin(admin.ModelAdmin):
    """No adding, changing or deleting rows from the admin."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(TaskRecord)
class TaskRecordAdmin(ReadOnlyAdmin):
    """Tasks the signed-in user may see; a Cancel button and a "Cancel selected" action."""

    list_display = (
        "id",
        "owner_display",
        "queue",
        "status",
        "progress_display",
        "attempts",
        "duration_display",
        "created_at",
    )
    list_filter = ("status", "queue")
    search_fields = ("id", "key", "owner")
    ordering = ("-created_at", "-id")
    actions = ("cancel_selected",)
    fieldsets = [(name, {"fields": fields}) for name, fields in FIELD_GROUPS]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return list(READ_ONLY_FIELDS)

    # -- who sees what --

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _is_active_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Any staff user may look; get_queryset narrows what they see.
        return _is_active_staff(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskRecord]:
        user_id = user_id_of(authority_for_user(request.user))
        return TaskRecord.objects.visible_to(user_id)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        task = self._visible_task(request, object_id)
        context = {**(extra_context or {}), "can_cancel": task.status not in TERMINAL_STATUSES}
        return super().change_view(request, object_id, form_url, context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._visible_task(request, object_id)
        return super().history_view(request, object_id, extra_context)

    def _visible_task(self, request: HttpRequest, object_id: str) -> TaskRecord:
        """The task, or 404 when it is missing or not visible (the two look alike)."""
        return get_object_or_404(self.get_queryset(request), pk=unquote(object_id))

    # -- cancelling, through the public API --

    def get_urls(self) -> list[URLPattern]:
        opts = self.opts
        cancel = path(
            "<path:object_id>/cancel/",
            self.admin_site.admin_view(require_POST(self.cancel_view)),
            name=f"{opts.app_label}_{opts.model_name}_cancel",
        )
        return [cancel, *super().get_urls()]

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Cancel one task with the user's authority; report and go back to its page."""
        if not self.has_view_permission(request):
            raise Http404
        task_id = unquote(object_id)
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
        if request.POST.get("select_across") == "1":
            ids = list(queryset.values_list("pk", flat=True))
        else:
            ids = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        cancelled, ended, hidden = _cancel_each(ids, request)
        if cancelled:
            self.message_user(request, f"Cancelled: {', '.join(cancelled)}.", messages.SUCCESS)
        if ended:
            self.message_user(request, f"Already ended: {', '.join(ended)}.", messages.WARNING)
        if hidden:
            self.message_user(
                request,
                f"{hidden} selected task(s) not found or not visible to you; nothing was done.",
                messages.ERROR,
            )

    # -- columns and fields --

    @admin.display(description="owner", ordering="owner")
    def owner_display(self, task: TaskRecord) -> str:
        return task.owner if task.owner is not None else "(global)"

    @admin.display(description="progress", ordering="progress")
    def progress_display(self, task: TaskRecord) -> str:
        return progress_bar(task.progress)

    @admin.display(description="duration")
    def duration_display(self, task: TaskRecord) -> str:
        elapsed = task_duration(task.started_at, task.finished_at)
        return EMPTY if elapsed is None else format_seconds(elapsed.total_seconds())

    @admin.display(description="watchers")
    def watchers_display(self, task: TaskRecord) -> str:
        return ", ".join(task.watcher_rows.order_by("user_id").values_list("user_id", flat=True))

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
        failures = [_failure_html(e) for e in task.errors or []]
        return format_html("{}", "".join(failures)) if failures else EMPTY


def _is_active_staff(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_staff)


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
        return f"Task {task_id} has already ended ({e}).", messages.WARNING
    return f"Task {task_id} was cancelled.", messages.SUCCESS


def _cancel_each(ids: Iterable[str], request: HttpRequest) -> tuple[list[str], list[str], int]:
    """Cancel every id: the cancelled ids, the already ended ids, and how many were not visible."""
    authority = authority_for_user(request.user)
    cancelled: list[str] = []
    ended: list[str] = []
    hidden = 0
    for task_id in ids:
        try:
            cancel_task(task_id, authority)
        except TaskNotFound:
            hidden += 1
        except TaskAlreadyFinished:
            ended.append(task_id)
        else:
            cancelled.append(task_id)
    return cancelled, ended, hidden


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    """The registered runtimes with their heartbeat age, running count and lease state."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        report = operations.status(default_store())
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Worker processes",
            "report": report,
            "workers": sorted(report.workers, key=lambda w: (w.worker.host, w.worker.pid)),
            **(extra_context or {}),
        }
        return TemplateResponse(
            request, "admin/django_workers/workerprocess/change_list.html", context
        )

    def get_urls(self) -> list[URLPattern]:
        # The list is the whole page: a worker has no detail to open.
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_changelist",
            )
        ]


# Periodic schedules: their page lives with the rest of periodic tasks.
admin.site.register(ScheduleRecord, ScheduleRecordAdmin)
