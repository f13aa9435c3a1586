"""The Django admin for tasks, workflows and worker processes: read-only, cancelling via the API.

Every page is scoped by the signed-in user's authority (``web_authority``):
staff see the tasks they own or watch and the workflows they own, holders of
``manage_all_tasks`` see all. A task or workflow a user may not see is 404,
exactly like one that does not exist. No page writes a task or workflow row:
the only change, cancelling, goes through ``cancel_task`` or ``cancel_workflow``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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
from django.views.decorators.http import require_POST, require_safe

from django_workers import clock, operations
from django_workers.api import cancel_task
from django_workers.authority import TASK_ID_MAX_LENGTH, user_id_of
from django_workers.exceptions import (
    TaskAlreadyFinished,
    TaskNotFound,
    WorkflowAlreadyFinished,
    WorkflowNotFound,
)
from django_workers.info import TERMINAL_STATUSES
from django_workers.models import TaskRecord, WorkerProcess, WorkflowRecord
from django_workers.stores import default_store
from django_workers.web_authority import authority_for_user
from django_workers.workflow_svg import colours, workflow_svg
from django_workers.workflows import (
    WorkflowInfo,
    WorkflowNodeInfo,
    cancel_workflow,
    get_workflow_status,
)
from django_workers.workflows.handles import STATES as WORKFLOW_STATES

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
        authority = authority_for_user(request.user)

        def cancel(task_id: str) -> str:
            cancel_task(task_id, authority)
            return "Cancelled"

        outcomes = _cancel_each(
            _selected_ids(request, queryset), cancel, TaskNotFound, TaskAlreadyFinished
        )
        _report(self, request, outcomes, "task")

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


@dataclass
class CancelOutcomes:
    """What a "Cancel selected" action did: ids by outcome, and how many were not visible."""

    #: The ids cancelled, under the message that reports them ("Cancelled", ...).
    cancelled: dict[str, list[str]] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)
    hidden: int = 0


def _selected_ids(request: HttpRequest, queryset: QuerySet[Any]) -> list[str]:
    """The ids an action was asked for: the ticked boxes, or every row the user may see."""
    if request.POST.get("select_across") == "1":
        return [str(pk) for pk in queryset.values_list("pk", flat=True)]
    return request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)


def _cancel_each(
    ids: Iterable[str],
    cancel: Callable[[str], str],
    not_found: type[Exception],
    ended: type[Exception],
) -> CancelOutcomes:
    """Cancel every id through ``cancel`` (which names its outcome); sort out what happened."""
    outcomes = CancelOutcomes()
    for object_id in ids:
        try:
            done = cancel(object_id)
        except not_found:
            outcomes.hidden += 1
        except ended:
            outcomes.ended.append(object_id)
        else:
            outcomes.cancelled.setdefault(done, []).append(object_id)
    return outcomes


def _report(
    model_admin: admin.ModelAdmin, request: HttpRequest, outcomes: CancelOutcomes, noun: str
) -> None:
    """One message per outcome; ids the user may not see are counted, never named."""
    for done, ids in outcomes.cancelled.items():
        model_admin.message_user(request, f"{done}: {', '.join(ids)}.", messages.SUCCESS)
    if outcomes.ended:
        model_admin.message_user(
            request, f"Already ended: {', '.join(outcomes.ended)}.", messages.WARNING
        )
    if outcomes.hidden:
        model_admin.message_user(
            request,
            f"{outcomes.hidden} selected {noun}(s) not found or not visible to you; "
            "nothing was done.",
            messages.ERROR,
        )


# -- workflows ---------------------------------------------------------------------------------


def could_be_id(object_id: str) -> bool:
    """Whether a task or workflow could have this id (checked before it reaches a query)."""
    return 0 < len(object_id) <= TASK_ID_MAX_LENGTH and object_id.isprintable()


def state_badge(state: str) -> str:
    """A workflow's, node's or undo's state as a small label in its picture's colours."""
    fill, stroke = colours(state)
    return format_html(
        '<span class="dw-state dw-state-{}" style="background:{};border:1px solid {};'
        'color:#111827;padding:0 6px;border-radius:8px;white-space:nowrap">{}</span>',
        state,
        fill,
        stroke,
        state,
    )


def node_counts(nodes: Iterable[dict[str, Any]]) -> Counter[str]:
    """How many of a workflow row's nodes are in each state."""
    return Counter(str(node.get("status", "")) for node in nodes)


#: The states a node can be in, in the order a node goes through them.
NODE_STATES = ("waiting", "pending", "running", "completed", "failed", "cancelled")
#: Node states that are ends: a node there never runs again.
NODE_ENDS = ("completed", "failed", "cancelled")


class WorkflowStateFilter(admin.SimpleListFilter):
    """Every workflow state, whichever the user's workflows happen to be in."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, state.replace("_", " ")) for state in WORKFLOW_STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(state=self.value()) if self.value() else queryset


@admin.register(WorkflowRecord)
class WorkflowRecordAdmin(ReadOnlyAdmin):
    """Workflows the signed-in user may see; a page with the DAG's picture; cancel actions."""

    list_display = (
        "id",
        "owner_display",
        "state_display",
        "nodes_display",
        "created_at",
        "finished_at",
    )
    list_filter = (WorkflowStateFilter,)
    search_fields = ("id", "key", "owner")
    ordering = ("-created_at", "-id")
    actions = ("cancel_selected", "cancel_selected_without_undo")

    # -- who sees what --

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _is_active_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Any staff user may look; get_queryset and get_workflow_status narrow what they see.
        return _is_active_staff(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRecord]:
        user_id = user_id_of(authority_for_user(request.user))
        return WorkflowRecord.objects.visible_to(user_id)

    def get_urls(self) -> list[URLPattern]:
        # The list, a workflow's page and its cancel: nothing adds, edits or deletes one.
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        return [
            path("", view(self.changelist_view), name=f"{name}_changelist"),
            path(
                "<path:object_id>/cancel/",
                view(require_POST(self.cancel_view)),
                name=f"{name}_cancel",
            ),
            path(
                "<path:object_id>/change/",
                view(require_safe(self.change_view)),
                name=f"{name}_change",
            ),
        ]

    # -- a workflow's page, read through the workflow API --

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The workflow, its DAG's picture and its nodes; 404 when missing or not visible."""
        info = self._visible_workflow(request, object_id)
        has_undo = any(node.undo is not None for node in info.nodes)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Workflow {info.id}",
            "workflow": info,
            "state": state_badge(info.state),
            "picture": workflow_svg(info, _task_change_url),
            "nodes": [_node_row(node) for node in info.nodes],
            "legend": [state_badge(s) for s in (*NODE_STATES, *(("idle",) if has_undo else ()))],
            "can_cancel": info.state == "running",
            # Without undo steps to skip, "without undo" would be the same button twice.
            "offers_no_undo": has_undo and info.undo_on_cancel,
            "has_undo": has_undo,
            **(extra_context or {}),
        }
        return TemplateResponse(
            request, "admin/django_workers/workflowrecord/change_form.html", context
        )

    def _visible_workflow(self, request: HttpRequest, object_id: str) -> WorkflowInfo:
        """The workflow, or 404 when it is missing or not visible (the two look alike)."""
        workflow_id = unquote(object_id)
        if not self.has_view_permission(request) or not could_be_id(workflow_id):
            raise Http404
        try:
            return get_workflow_status(workflow_id, authority_for_user(request.user))
        except WorkflowNotFound:
            raise Http404 from None

    # -- cancelling, through the workflow API --

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Cancel one workflow as the user (``undo=false`` skips compensation); report it."""
        info = self._visible_workflow(request, object_id)
        undo = False if request.POST.get("undo") == "false" else None
        try:
            after = cancel_workflow(info.id, authority_for_user(request.user), undo=undo)
        except WorkflowNotFound:
            raise Http404 from None
        except WorkflowAlreadyFinished as e:
            self.message_user(
                request, f"Workflow {info.id} has already ended ({e}).", messages.WARNING
            )
        else:
            self.message_user(request, _cancelled_message(after, undo), messages.SUCCESS)
        opts = self.opts
        return HttpResponseRedirect(
            reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(info.id)])
        )

    @admin.action(description="Cancel selected workflows (undo completed steps as submitted)")
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[WorkflowRecord]) -> None:
        """Cancel each selected workflow, compensating as it was submitted; report each."""
        self._cancel_selected(request, queryset, None)

    @admin.action(description="Cancel selected workflows without undo")
    def cancel_selected_without_undo(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRecord]
    ) -> None:
        """Cancel each selected workflow and run none of its undo steps; report each."""
        self._cancel_selected(request, queryset, False)

    def _cancel_selected(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRecord], undo: bool | None
    ) -> None:
        authority = authority_for_user(request.user)

        def cancel(workflow_id: str) -> str:
            if not could_be_id(workflow_id):
                raise WorkflowNotFound(workflow_id)
            after = cancel_workflow(workflow_id, authority, undo=undo)
            if after.state == "compensating":
                return "Cancelled, undoing their completed steps"
            return "Cancelled" if undo is None else "Cancelled without undo"

        outcomes = _cancel_each(
            _selected_ids(request, queryset), cancel, WorkflowNotFound, WorkflowAlreadyFinished
        )
        _report(self, request, outcomes, "workflow")

    # -- columns --

    @admin.display(description="owner", ordering="owner")
    def owner_display(self, workflow: WorkflowRecord) -> str:
        return workflow.owner if workflow.owner is not None else "(system)"

    @admin.display(description="state", ordering="state")
    def state_display(self, workflow: WorkflowRecord) -> str:
        return state_badge(workflow.state)

    @admin.display(description="nodes")
    def nodes_display(self, workflow: WorkflowRecord) -> str:
        counts = node_counts(workflow.nodes)
        total = sum(counts.values())
        ended = sum(counts[state] for state in NODE_ENDS)
        detail = ", ".join(f"{counts[state]} {state}" for state in NODE_STATES if counts[state])
        return format_html(
            '<progress class="dw-nodes" value="{}" max="{}" title="{}"></progress> {}/{} ended'
            ' <span class="quiet">({})</span>',
            ended,
            total,
            detail,
            ended,
            total,
            detail,
        )


def _task_change_url(task_id: str) -> str:
    return reverse("admin:django_workers_taskrecord_change", args=[quote(task_id)])


def _node_row(node: WorkflowNodeInfo) -> dict[str, Any]:
    """What the node table shows of one node: its fields, its state's badge, its links."""
    undo = node.undo
    return {
        "node": node,
        "state": state_badge(node.state),
        "task_url": _task_change_url(node.task_id),
        "undo_state": state_badge(undo.state) if undo else "",
        "undo_url": _task_change_url(undo.task_id) if undo and undo.task_id else None,
    }


def _cancelled_message(info: WorkflowInfo, undo: bool | None) -> str:
    if info.state == "compensating":
        return f"Workflow {info.id} was cancelled; its completed steps are being undone."
    if undo is False:
        return f"Workflow {info.id} was cancelled without undo."
    return f"Workflow {info.id} was cancelled."


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
