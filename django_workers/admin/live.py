"""The live parts of a task's and a workflow's admin page, as JSON for the page's script.

``static/django_workers/admin_live.js`` polls these views every 1.5 s while
the task or workflow has not ended, puts what they answer into the page, and
reloads the page once when it ends (its buttons and outcome change then). Each
view is gated exactly like the page it serves: 404 for what the user may not
see. The parts come rendered by the server, escaped as the page itself is, so
the script holds no markup of its own and the page works without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.urls import URLPattern, path
from django.views.decorators.http import require_safe

from django_workers.admin.base import EMPTY, could_be_id
from django_workers.info import TERMINAL_STATUSES

#: Milliseconds between two polls of the page's script (``data-dw-interval``).
POLL_INTERVAL_MS = 1500

Answer = Callable[[admin.ModelAdmin, HttpRequest, str], dict[str, Any]]


def task_now(model_admin: admin.ModelAdmin, request: HttpRequest, object_id: str) -> dict[str, Any]:
    """A task's status, progress, attempts and duration as its page shows them."""
    # Imported here, for the same reason as the workflow pages' helpers below.
    from django_workers.admin.tasks import (
        TaskRecordAdmin,
        format_seconds,
        progress_bar,
        status_badge,
        task_duration,
    )

    assert isinstance(model_admin, TaskRecordAdmin)
    task_id = unquote(object_id)
    if not could_be_id(task_id):
        raise Http404
    task = get_object_or_404(model_admin.get_queryset(request), pk=task_id)
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


def workflow_now(
    model_admin: admin.ModelAdmin, request: HttpRequest, object_id: str
) -> dict[str, Any]:
    """A workflow's state, its DAG's picture and its node table's rows, as its page shows them."""
    # Imported here: the workflow pages import this module for its routes. The page's
    # own helpers draw each part, so the parts and the page never differ.
    from django_workers.admin.workflows import (
        WorkflowRecordAdmin,
        _node_row,
        _task_change_url,
        offered_actions,
        state_cell,
    )
    from django_workers.workflow_svg import workflow_svg

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


def live_url(model_admin: admin.ModelAdmin, answer: Answer) -> URLPattern:
    """``<id>/live/``: ``answer`` as JSON, through the admin's login and permission checks."""

    def view(request: HttpRequest, object_id: str) -> HttpResponse:
        if not model_admin.has_view_permission(request):
            raise Http404
        response = JsonResponse(answer(model_admin, request, object_id))
        response["Cache-Control"] = "no-store"
        return response

    opts = model_admin.opts
    return path(
        "<path:object_id>/live/",
        model_admin.admin_site.admin_view(require_safe(view)),
        name=f"{opts.app_label}_{opts.model_name}_live",
    )
