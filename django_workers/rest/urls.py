"""The task and workflow routes, each with or without a trailing slash, and the schema.

A key may hold ``/``, so an id is matched as "anything" (a newline too, so that
the API refuses it as a bad id rather than the URL resolver); each cancel route is
tried first and takes the longest id, so ``<id>/actions/cancel`` always
cancels ``<id>`` (and ``<id>/actions/rerun`` re-runs it).
"""

from __future__ import annotations

from django.urls import re_path

from django_workers.rest import views
from django_workers.rest.schema import schema_view

app_name = "django_workers"

urlpatterns = [
    re_path(r"^tasks/?$", views.TaskListView.as_view(), name="task-list"),
    re_path(
        r"^tasks/(?P<task_id>(?s:.+))/actions/cancel/?$",
        views.TaskCancelView.as_view(),
        name="task-cancel",
    ),
    re_path(r"^tasks/(?P<task_id>(?s:.+?))/?$", views.TaskDetailView.as_view(), name="task-detail"),
    re_path(r"^workflows/?$", views.WorkflowListView.as_view(), name="workflow-list"),
    re_path(
        r"^workflows/(?P<workflow_id>(?s:.+))/actions/cancel/?$",
        views.WorkflowCancelView.as_view(),
        name="workflow-cancel",
    ),
    re_path(
        r"^workflows/(?P<workflow_id>(?s:.+))/actions/rerun/?$",
        views.WorkflowRerunView.as_view(),
        name="workflow-rerun",
    ),
    re_path(
        r"^workflows/(?P<workflow_id>(?s:.+?))/?$",
        views.WorkflowDetailView.as_view(),
        name="workflow-detail",
    ),
    re_path(r"^schema/?$", schema_view(), name="schema"),
]
