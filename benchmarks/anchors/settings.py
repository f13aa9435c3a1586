"""Settings of the anchors' benchmark project: django-tasks-db and Procrastinate side by side.

Runs only in benchmarks/.venv-anchors, against its own database (DATABASE_URL,
``bench_anchors`` by default), never the project's test database.
"""

from __future__ import annotations

from benchmarks.dbconfig import database_from_env

SECRET_KEY = "django-workers-benchmarks-anchors"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django_tasks_db",
    "procrastinate.contrib.django",
    "benchmarks.anchors",
]
DATABASES = {"default": database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
