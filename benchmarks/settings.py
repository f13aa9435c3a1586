"""Settings of the tiny benchmark project for django-workers (DATABASE_URL picks the database)."""

from __future__ import annotations

import os

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
_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")
if _POSTGRES and os.environ.get("BENCH_SERVER_SIDE_BINDING") == "1":
    # psycopg's server-side binding, which prepares a statement after 5 runs of it
    # (the anchors' settings never read this).
    DATABASES["default"]["OPTIONS"] = {"server_side_binding": True}
if _POSTGRES and os.environ.get("BENCH_LISTEN_URL"):
    # pooler_wakeup.py: LISTEN on a direct connection while all else goes through the pooler.
    DATABASES["listen"] = database_from_env("BENCH_LISTEN_URL")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Nothing in the benchmark needs a django.tasks backend; keep Django's default out of the way.
TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
SILENCED_SYSTEM_CHECKS = ["django_workers.W002"]  # they submit with submit_task()
# The benchmark tasks live in benchmarks/, which is no installed app.
DJANGO_WORKERS: dict = {"TASK_MODULES": ["benchmarks"]}
if "listen" in DATABASES:
    DJANGO_WORKERS["LISTEN_DATABASE"] = "listen"
