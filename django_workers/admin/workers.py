"""The worker processes page: each runtime's lease, heartbeat age and running count."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from django_workers import operations
from django_workers.admin.base import ReadOnlyAdmin
from django_workers.admin.queues import queues_url
from django_workers.models import WorkerProcess
from django_workers.stores import default_store


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin[WorkerProcess]):
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
        # The list is the whole page: a worker has no detail to open. The queues page
        # sits beside it, with its permission.
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_changelist",
            ),
            queues_url(self),
        ]
