"""A site that mounts the admin but not ``django_workers.urls`` (the task_progress tag's test)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
