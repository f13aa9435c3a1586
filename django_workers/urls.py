"""The app's URLs: mount with ``path("workers/", include("django_workers.urls"))``.

The REST API's routes (``django_workers.rest.urls``), and ``metrics``: the
database's figures for Prometheus (``django_workers.metrics``).
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, re_path

from django_workers.metrics import metrics_view
from django_workers.rest.urls import app_name
from django_workers.rest.urls import urlpatterns as rest_urlpatterns

urlpatterns: list[URLPattern | URLResolver] = [
    *rest_urlpatterns,
    re_path(r"^metrics/?$", metrics_view, name="metrics"),
]

__all__ = ["app_name", "urlpatterns"]
