"""The app's URLs: mount with ``path("workers/", include("django_workers.urls"))``."""

from __future__ import annotations

from django_workers.rest.urls import app_name, urlpatterns

__all__ = ["app_name", "urlpatterns"]
