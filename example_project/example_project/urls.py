"""URLs of the example project: the admin, where tasks can be watched and cancelled."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The REST API mounts here once django_workers.urls exists:
    # path("workers/", include("django_workers.urls")),
]
