"""The queues page: each queue's waiting, retrying and running tasks, recent ends and workers.

The figures are ``operations.status()``'s, the function ``manage.py workers
status`` prints, so the page and the command never disagree. The page belongs
to the worker processes' admin and takes its permission: queues, like workers,
belong to no user.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.views.decorators.http import require_safe

from django_workers import operations
from django_workers.stores import default_store

#: The URL name of the page, under the admin's namespace.
URL_NAME = "django_workers_queues"


def queues_view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Every queue ``workers status`` lists, with the same figures."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    report = operations.status(default_store())
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Queues",
        "report": report,
        "queues": [{"state": q, "figures": q.to_json()} for q in report.queues],
    }
    return TemplateResponse(request, "admin/django_workers/queues.html", context)


def queues_url(model_admin: admin.ModelAdmin[Any]) -> URLPattern:
    """The page's route, mounted under ``model_admin``'s URLs and gated like its pages."""

    def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        return queues_view(model_admin, request)

    return path("queues/", model_admin.admin_site.admin_view(require_safe(view)), name=URL_NAME)
