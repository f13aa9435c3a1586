"""The database checks: are the django_workers migrations applied where the workers look.

Not registered with Django's checks: ``migrate`` runs the database checks
before it migrates, so a registered one would stop the very command that fixes
it. The commands that need the tables (``runworkers``, ``workers``) call them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.db import DatabaseError, connections

from django_workers.conf import workers_settings


def check_migrations_applied(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """Report a workers database whose django_workers migrations are not all applied.

    ``runworkers`` and ``workers`` call it before they start (see the module's note).
    """
    alias = workers_settings.DATABASE
    if not databases or not isinstance(alias, str) or alias not in databases:
        return []
    if alias not in settings.DATABASES:
        return []  # E011 reports it
    from django.db.migrations.executor import MigrationExecutor

    try:
        if _all_migration_files_applied(alias):
            return []  # every start of a worker pays this check: skip loading the graph
        executor = MigrationExecutor(connections[alias])
        leaves = executor.loader.graph.leaf_nodes("django_workers")
        pending = executor.migration_plan(leaves)
    except DatabaseError as e:
        return [
            Error(
                f"Cannot read the migrations of database {alias!r}: {e}",
                hint="Check that the database server is running and that DATABASES["
                f"{alias!r}] points at it.",
                id="django_workers.E014",
            )
        ]
    if not pending:
        return []
    return [
        Error(
            f"Database {alias!r} lacks the django-workers tables: the migrations of "
            "django_workers are not all applied.",
            hint=f"Run 'python manage.py migrate' (with --database {alias} if it is not the "
            "default), then start the workers again.",
            id="django_workers.E013",
        )
    ]


def _all_migration_files_applied(alias: str) -> bool:
    """Whether every migration file of django_workers is recorded as applied on ``alias``.

    One read of ``django_migrations`` and a listing of the migrations package, without
    importing the migrations of every app as the full plan does. False (not known)
    sends the caller to the full plan, which also understands squashed migrations.
    """
    import pkgutil
    from importlib import import_module

    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.recorder import MigrationRecorder

    module_name, _explicit = MigrationLoader.migrations_module("django_workers")
    if module_name is None:
        return False
    try:
        package = import_module(module_name)
    except ImportError:
        return False
    names = {
        name
        for _finder, name, is_package in pkgutil.iter_modules(getattr(package, "__path__", []))
        if not is_package and name[0] not in "_~"
    }
    recorder = MigrationRecorder(connections[alias])
    if not names or not recorder.has_table():
        return False
    applied = recorder.applied_migrations()
    return all(("django_workers", name) in applied for name in names)


def workers_databases() -> list[str]:
    """The database aliases the workers use (DATABASE, then LISTEN_DATABASE) among DATABASES."""
    aliases = [workers_settings.DATABASE, workers_settings.LISTEN_DATABASE]
    found = [a for a in aliases if isinstance(a, str) and a in settings.DATABASES]
    return list(dict.fromkeys(found))


def missing_tables() -> str | None:
    """One paragraph saying what to do if the django_workers tables are missing, else None."""
    problems = check_migrations_applied(databases=workers_databases())
    return "\n".join(f"{p.msg}\nHINT: {p.hint} ({p.id})" for p in problems) or None
