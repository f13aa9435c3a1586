"""The live parts of a task's and a workflow's admin page, as JSON for the page's script.

``static/django_workers/admin_live.js`` polls these views every 1.5 s while
the task or workflow has not ended, puts what they answer into the page, and
reloads the page once when it ends (its buttons and outcome change then). Each
view is gated exactly like the page it serves: 404 for what the user may not
see. The parts come rendered by the server, escaped as the page itself is, so
the script holds no markup of its own and the page works without it. Each
page's admin supplies what its view answers (``task_now`` in ``admin/tasks.py``,
``workflow_now`` in ``admin/workflows.py``), drawn by the page's own helpers so
that the parts and the page never differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, path
from django.views.decorators.http import require_safe

#: Milliseconds between two polls of the page's script (``data-dw-interval``).
POLL_INTERVAL_MS = 1500

Answer = Callable[["admin.ModelAdmin[Any]", HttpRequest, str], dict[str, Any]]


def live_url(model_admin: admin.ModelAdmin[Any], answer: Answer) -> URLPattern:
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
