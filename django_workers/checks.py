"""System checks: misconfiguration is reported at start-up with a hint, not deep in a worker."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.utils.module_loading import import_string

from django_workers.conf import workers_settings


@register(Tags.database, Tags.compatibility)
def check_sqlite_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when the workers' SQLite database lacks WAL, IMMEDIATE and a busy timeout."""
    alias = workers_settings.DATABASE
    db = settings.DATABASES.get(alias, {})
    if "sqlite3" not in db.get("ENGINE", ""):
        return []
    options = db.get("OPTIONS", {})
    problems = []
    if options.get("transaction_mode") != "IMMEDIATE":
        problems.append('"transaction_mode": "IMMEDIATE"')
    if not options.get("timeout"):
        problems.append('"timeout": 20')
    if "journal_mode=wal" not in str(options.get("init_command", "")).lower().replace(" ", ""):
        problems.append('"init_command": "PRAGMA journal_mode=WAL;"')
    if not problems:
        return []
    return [
        Warning(
            f"SQLite database {alias!r} is not set up for concurrent workers.",
            hint=f"Add {', '.join(problems)} to DATABASES[{alias!r}]['OPTIONS'], or web requests "
            "and workers will meet 'database is locked'.",
            id="django_workers.W001",
        )
    ]


@register()
def check_workers_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report dotted paths that do not import and malformed queue settings."""
    errors: list[CheckMessage] = []
    for name in ("STORE", "QUEUE_AUTHORIZER", "WATCH_AUTHORIZER"):
        path = getattr(workers_settings, name)
        if path is None:
            continue
        try:
            import_string(path)
        except ImportError as e:
            errors.append(
                Error(
                    f"DJANGO_WORKERS[{name!r}] = {path!r} cannot be imported: {e}",
                    hint="Give the full dotted path of an importable object.",
                    id="django_workers.E001",
                )
            )
    heartbeat, lease = workers_settings.HEARTBEAT_INTERVAL, workers_settings.LEASE_TIMEOUT
    if heartbeat * 2 > lease:
        errors.append(
            Error(
                f"DJANGO_WORKERS['HEARTBEAT_INTERVAL'] ({heartbeat:g} s) is more than half of "
                f"'LEASE_TIMEOUT' ({lease:g} s): a live worker's lease could run out between "
                "two heartbeats and its tasks be recovered while they run.",
                hint="Lower HEARTBEAT_INTERVAL or raise LEASE_TIMEOUT (defaults: 5 s and 30 s).",
                id="django_workers.E003",
            )
        )
    queues = workers_settings.QUEUES
    if not isinstance(queues, dict):
        errors.append(
            Error(
                "DJANGO_WORKERS['QUEUES'] must be a dict.",
                hint='Map queue names to settings, e.g. {"reports": {"concurrency": 1}}.',
                id="django_workers.E002",
            )
        )
        return errors
    for queue, conf in queues.items():
        limit = conf.get("concurrency") if isinstance(conf, dict) else None
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            errors.append(
                Error(
                    f"DJANGO_WORKERS['QUEUES'][{queue!r}]['concurrency'] must be an int >= 1.",
                    hint="Use 1 for a sequential queue, or leave it out for no limit.",
                    id="django_workers.E002",
                )
            )
    return errors
