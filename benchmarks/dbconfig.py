"""The benchmark projects' DATABASES entry, from DATABASE_URL (used by both settings modules).

PostgreSQL: a persistent connection per thread (``CONN_MAX_AGE=None``), so that
every system measured here gets the same setting (Django's default of 0 would
cost the anchors a connection per job). SQLite: what docs/install.md tells users
to set (WAL, IMMEDIATE transactions, a busy timeout).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url

HERE = Path(__file__).resolve().parent
DEFAULT_URL = f"sqlite:///{HERE / 'results' / 'bench-workers.sqlite3'}"


def database_from_env(variable: str = "DATABASE_URL") -> dict[str, Any]:
    """A DATABASES entry for the URL in ``variable`` (a SQLite file when unset)."""
    db: dict[str, Any] = dict(dj_database_url.parse(os.environ.get(variable) or DEFAULT_URL))
    db["CONN_MAX_AGE"] = None
    db["CONN_HEALTH_CHECKS"] = False
    if db["ENGINE"] == "django.db.backends.sqlite3":
        db["OPTIONS"] = {
            "init_command": "PRAGMA journal_mode=WAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    return db


def configure_site(url: str, name: str, workers: dict[str, Any] | None = None) -> None:
    """Settings of a minimal site on the database ``url``, for a benchmark run as a script.

    Its worker subprocesses build the same ones. The database takes this module's
    options; the tasks live in ``benchmarks``, no installed app; ``workers`` adds
    to ``DJANGO_WORKERS``.
    """
    import django
    from django.conf import settings

    os.environ["DATABASE_URL"] = url
    settings.configure(
        SECRET_KEY=name,
        USE_TZ=True,
        TIME_ZONE="UTC",
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_workers"],
        DATABASES={"default": database_from_env()},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        DJANGO_WORKERS={"TASK_MODULES": ["benchmarks"], **(workers or {})},
        LOGGING_CONFIG=None,
        # The benchmarks submit with submit_task(); none enqueues through django.tasks.
        SILENCED_SYSTEM_CHECKS=["django_workers.W002"],
    )
    django.setup()
