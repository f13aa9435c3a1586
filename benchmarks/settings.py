"""Settings of the tiny benchmark project for django-workers (DATABASE_URL picks the database)."""

from __future__ import annotations

from benchmarks.dbconfig import database_from_env

SECRET_KEY = "django-workers-benchmarks"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "rest_framework",
    "django_workers",
]
DATABASES = {"default": database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Nothing in the benchmark needs a django.tasks backend; keep Django's default out of the way.
TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
DJANGO_WORKERS: dict = {}
