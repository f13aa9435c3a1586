"""The Django app config: registers the system checks and the django.tasks hooks."""

from __future__ import annotations

from django.apps import AppConfig


class DjangoWorkersConfig(AppConfig):
    name = "django_workers"
    verbose_name = "Workers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # checks registers the system checks on import.
        from django_workers import backends, checks, signals  # noqa: F401

        # Runs of records enqueued through django.tasks send Django's own task signals.
        # Connected only where TASKS uses the backend: a site that does not pays nothing
        # per task for them.
        if backends.configured():
            signals.run_started.connect(backends.send_task_started, dispatch_uid="workers-started")
            signals.run_finished.connect(
                backends.send_task_finished, dispatch_uid="workers-finished"
            )
