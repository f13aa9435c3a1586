"""URLs of the example project: the admin, and the REST API to watch and cancel tasks."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("workers/", include("django_workers.urls")),
]
