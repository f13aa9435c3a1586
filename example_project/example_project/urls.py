"""URLs of the example project: the admin, the REST API, and a page that follows reports."""

from django.contrib import admin
from django.urls import include, path
from shop.views import reports

urlpatterns = [
    path("admin/", admin.site.urls),
    path("workers/", include("django_workers.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("reports/", reports, name="reports"),
]
