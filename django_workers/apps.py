"""The Django app config: registers the system checks."""

from __future__ import annotations

from django.apps import AppConfig


class DjangoWorkersConfig(AppConfig):
    name = "django_workers"
    verbose_name = "Workers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_workers import checks  # noqa: F401  (registers the checks)
