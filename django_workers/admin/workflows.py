"""The workflow pages: a scoped list, a page with a picture of the DAG, cancel and re-run.

The list reads workflow rows as the task list reads task rows; a workflow's page,
every cancel and every re-run go through the workflow API (``get_workflow_status``,
``cancel_workflow``, ``rerun_workflow``) with the user's authority.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST, require_safe

from django_workers import visibility
from django_workers.admin.base import (
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
from django_workers.authority import user_id_of
from django_workers.engine.records import shown_state
from django_workers.exceptions import (
    AuthorizationError,
    WorkflowAlreadyFinished,
    WorkflowCancelNarrows,
    WorkflowCannotRerun,
    WorkflowNotFound,
)
from django_workers.models import WorkflowRecord, WorkflowRecordQuerySet
from django_workers.web_authority import authority_for_user
from django_workers.workflow_svg import workflow_svg
from django_workers.workflows import (
    WorkflowInfo,
    WorkflowNodeInfo,
    cancel_workflow,
    get_workflow_status,
    rerun_workflow,
)
from django_workers.workflows.handles import STATES as WORKFLOW_STATES


def state_badge(state: str) -> str:
    """A workflow's, node's or undo's state as a small label in its picture's colours."""
    return badge(state, state)


def node_counts(nodes: Iterable[dict[str, Any]]) -> Counter[str]:
    """How many of a workflow row's nodes are in each state."""
    return Counter(str(node.get("status", "")) for node in nodes)


#: The states a node can be in, in the order a node goes through them.
NODE_STATES = ("waiting", "pending", "running", "completed", "failed", "cancelled")
#: Node states that are ends: a node there never runs again.
NODE_ENDS = ("completed", "failed", "cancelled")


class WorkflowStateFilter(admin.SimpleListFilter):
    """Every workflow state as shown, whichever the user's workflows happen to be in."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, state.replace("_", " ")) for state in WORKFLOW_STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value not in WORKFLOW_STATES:
            return queryset
        return cast(WorkflowRecordQuerySet, queryset).in_state(value)


@admin.register(WorkflowRecord)
class WorkflowRecordAdmin(ReadOnlyAdmin[WorkflowRecord]):
    """Workflows the signed-in user may see; a page with the DAG's picture; cancel actions."""

    list_display = (
        "id",
        "owner_display",
        "state_display",
        "nodes_display",
        "created_at",
        "finished_at",
    )
    list_filter = (WorkflowStateFilter, ("created_at", admin.DateFieldListFilter), OwnerFilter)
    search_fields = ("id", "key", "owner")
    ordering = ("-created_at", "-id")
    actions = ("cancel_selected", "cancel_selected_without_undo")

    # -- who sees what --

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_active_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Any staff user may look; get_queryset and get_workflow_status narrow what they see.
        return is_active_staff(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRecord]:
        user_id = user_id_of(authority_for_user(request.user))
        return WorkflowRecord.objects.filter(visibility.workflows(user_id))

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
                "<path:object_id>/rerun/",
                view(require_POST(self.rerun_view)),
                name=f"{name}_rerun",
            ),
            path(
                "<path:object_id>/change/",
                view(require_safe(self.change_view)),
                name=f"{name}_change",
            ),
            live_url(self, workflow_now),
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
        labels = user_labels(list(info.watchers), request, self.admin_site)
        owner = {info.owner: labels[info.owner]} if info.owner else {}
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Workflow {info.id}",
            "workflow": info,
            "owner": owner.get(info.owner or "", "(system)"),
            "watchers": [labels[w] for w in info.watchers if w != info.owner],
            "state": state_cell(info),
            "actions": offered_actions(info),
            "picture": workflow_svg(info, _task_change_url),
            "nodes": [_node_row(node) for node in info.nodes],
            "legend": [state_badge(s) for s in (*NODE_STATES, *(("idle",) if has_undo else ()))],
            "can_cancel": offered_actions(info) == "cancel",
            # Without undo steps to skip, "without undo" would be the same button twice.
            "offers_no_undo": has_undo and info.undo_on_cancel,
            "can_drop_undo": offered_actions(info) == "drop-undo",
            "can_rerun": offered_actions(info) == "rerun",
            "has_undo": has_undo,
            "live_interval": POLL_INTERVAL_MS,
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
        """Cancel one workflow as the user (``undo=false`` skips compensation); report it.

        Dropping the undo of a cancel already accepted asks for a confirmation first.
        """
        info = self._visible_workflow(request, object_id)
        undo = False if request.POST.get("undo") == "false" else None
        confirmed = request.POST.get("confirm") == "drop-undo"
        narrows = undo is False and info.cancel_pending and bool(info.cancel_undo)
        if narrows and not confirmed:
            return self._confirm_drop_undo(request, info)
        if info.cancel_pending and not narrows:
            self.message_user(request, _already_cancelling_message(info), messages.WARNING)
            return self._back_to(info.id)
        try:
            after = cancel_workflow(
                info.id, authority_for_user(request.user), undo=undo, drop_undo=confirmed
            )
        except WorkflowNotFound:
            raise Http404 from None
        except WorkflowCancelNarrows:
            # Someone else's cancel with undo came first: ask before dropping it.
            return self._confirm_drop_undo(request, self._visible_workflow(request, object_id))
        except WorkflowAlreadyFinished as e:
            self.message_user(request, _not_running_message(e), messages.WARNING)
        else:
            self.message_user(request, _cancelled_message(after, undo), messages.SUCCESS)
        return self._back_to(info.id)

    # -- re-running, through the workflow API --

    def rerun_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Re-run one workflow as the user, if it is still the plan the page showed; report it."""
        info = self._visible_workflow(request, object_id)
        try:
            after = rerun_workflow(
                info.id,
                authority_for_user(request.user),
                plan_hash=request.POST.get("plan_hash") or info.plan_hash,
            )
        except WorkflowNotFound:
            raise Http404 from None
        except (WorkflowCannotRerun, AuthorizationError) as e:
            self.message_user(request, str(e), messages.WARNING)
        else:
            again = sum(1 for node in after.nodes if node.state != "completed")
            self.message_user(
                request,
                f"Workflow {after.id} runs again (run {after.runs}): {again} of its "
                f"{len(after.nodes)} steps run again; the completed ones keep their results.",
                messages.SUCCESS,
            )
        return self._back_to(info.id)

    def _back_to(self, workflow_id: str) -> HttpResponse:
        opts = self.opts
        return HttpResponseRedirect(
            reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(workflow_id)])
        )

    def _confirm_drop_undo(self, request: HttpRequest, info: WorkflowInfo) -> HttpResponse:
        """A page that says which undo steps a cancel without undo drops, and asks to confirm."""
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Drop the undo of workflow {info.id}?",
            "workflow": info,
            "dropped": [n.name for n in info.nodes if n.undo and n.state == "completed"],
            "maybe_dropped": [
                n.name for n in info.nodes if n.undo and n.state in ("pending", "running")
            ],
        }
        return TemplateResponse(
            request, "admin/django_workers/workflowrecord/drop_undo.html", context
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

        kept_undo: list[str] = []

        def cancel(workflow_id: str) -> str:
            if not could_be_id(workflow_id):
                raise WorkflowNotFound(workflow_id)
            try:
                after = cancel_workflow(workflow_id, authority, undo=undo)
            except WorkflowCancelNarrows:
                kept_undo.append(workflow_id)
                return ""
            if after.state == "compensating":
                return "Cancelled, undoing their completed steps"
            if after.state == "cancelling":
                return "Cancelled, ending once their running steps have stopped"
            return "Cancelled" if undo is None else "Cancelled without undo"

        outcomes = cancel_each(
            selected_ids(request, queryset), cancel, WorkflowNotFound, WorkflowAlreadyFinished
        )
        outcomes.cancelled.pop("", None)
        report(self, request, outcomes, "workflow")
        if kept_undo:
            self.message_user(
                request,
                f"Already being cancelled with undo, which was kept: {', '.join(kept_undo)}. "
                "To drop an undo, use the workflow's page (it asks you to confirm).",
                messages.WARNING,
            )

    # -- columns --

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        name_owners(changelist.result_list, request, self.admin_site)
        return changelist

    @admin.display(description="owner", ordering="owner")
    def owner_display(self, workflow: WorkflowRecord) -> str:
        if workflow.owner is None:
            return "(system)"
        return getattr(workflow, "owner_label", None) or workflow.owner

    @admin.display(description="state", ordering="state")
    def state_display(self, workflow: WorkflowRecord) -> str:
        return state_badge(shown_state(workflow.state, workflow.cancel_undo))

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


def workflow_now(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, object_id: str
) -> dict[str, Any]:
    """A workflow's state, its DAG's picture and its node table's rows, as its page shows them."""
    assert isinstance(model_admin, WorkflowRecordAdmin)
    info = model_admin._visible_workflow(request, object_id)
    has_undo = any(node.undo is not None for node in info.nodes)
    rows = render_to_string(
        "admin/django_workers/workflowrecord/node_rows.html",
        {"nodes": [_node_row(node) for node in info.nodes], "has_undo": has_undo},
        request,
    )
    return {
        "state": info.state,
        "state_html": state_cell(info),
        # The buttons the page offers; once they would differ, the script reloads the page.
        "actions": offered_actions(info),
        "picture": workflow_svg(info, _task_change_url),
        "nodes_html": rows,
        "ended": info.is_finished,
    }


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


def state_cell(info: WorkflowInfo) -> str:
    """The page's state: its label, and a note while a cancel waits for running steps."""
    note = _pending_note(info)
    if not note:
        return state_badge(info.state)
    return format_html('{} <span class="dw-cancel-note">{}</span>', state_badge(info.state), note)


def offered_actions(info: WorkflowInfo) -> str:
    """What the page's buttons may ask now: ``cancel``, ``drop-undo``, ``rerun`` or nothing."""
    if info.state == "running":
        return "cancel"
    # A cancel that undoes is pending: all that may still be asked is to drop the undo.
    if info.cancel_pending and info.cancel_undo:
        return "drop-undo"
    if info.accepts_rerun:
        return "rerun"
    return ""


def _pending_note(info: WorkflowInfo) -> str:
    """What the page says of a cancel accepted while nodes still run ("" if none)."""
    if not info.cancel_pending:
        return ""
    if info.cancel_undo:
        return "Cancel asked: running steps were told to stop; then the completed steps are undone."
    return "Cancel asked, without undo: running steps were told to stop; nothing is undone."


def _already_cancelling_message(info: WorkflowInfo) -> str:
    return f"Workflow {info.id} is already being cancelled ({info.state}); nothing changed."


def _cancelled_message(info: WorkflowInfo, undo: bool | None) -> str:
    if info.state == "compensating":
        return f"Workflow {info.id} was cancelled; its completed steps are being undone."
    if info.state == "cancelling":
        return (
            f"Workflow {info.id} was cancelled{' without undo' if undo is False else ''}; "
            "it ends once its running steps have stopped."
        )
    if undo is False:
        return f"Workflow {info.id} was cancelled without undo."
    return f"Workflow {info.id} was cancelled."


def _not_running_message(refusal: WorkflowAlreadyFinished) -> str:
    workflow_id, state = refusal.workflow_id, refusal.state
    if state == "compensating":
        return f"Workflow {workflow_id} is already being undone; nothing was cancelled."
    return f"Workflow {workflow_id} has already ended ({state}); nothing was cancelled."
