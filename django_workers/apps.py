"""The Django app config: registers the system checks and the django.tasks hooks."""

from __future__ import annotations

from django.apps import AppConfig


class DjangoWorkersConfig(AppConfig):
    name = "django_workers"
    verbose_name = "Workers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # checks registers the system checks; backends installs the takes_context
        # factory and the run observer that sends Django's task_started/finished.
        from django_workers import backends, checks  # noqa: F401
