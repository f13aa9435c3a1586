"""System checks: misconfiguration is reported at start-up with a hint, not deep in a worker.

Every check only reads: a wrong value of any type is an Error with its own id,
never an exception out of the check. ``manage.py check`` runs the settings
checks; ``runworkers`` also runs the database checks (``database_checks``).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections
from django.utils.module_loading import import_string

from django_workers.bounds import CONCURRENCY_MAX, COUNT_MAX, SECONDS_MAX
from django_workers.conf import DEFAULTS, workers_settings
from django_workers.documentation import docs_url
from django_workers.exceptions import InvalidTaskOptions, TaskNotImportable
from django_workers.options import TaskOptions
from django_workers.references import resolve

#: The keys a DJANGO_WORKERS["QUEUES"] entry may have.
QUEUE_KEYS = frozenset({"concurrency", "fair", "per_owner"})

#: What RETENTION may name: the finished statuses, and ended workflows.
RETENTION_STATUSES = ("COMPLETED", "FAILED", "CANCELLED", "WORKFLOWS")

#: Number settings, each with its test and how the test reads; none is above SECONDS_MAX.
NUMBERS: dict[str, tuple[Callable[[float], bool], str]] = {
    "HEARTBEAT_INTERVAL": (lambda n: n > 0, "a number of seconds > 0"),
    "LEASE_TIMEOUT": (lambda n: n > 0, "a number of seconds > 0"),
    "POLL_INTERVAL": (lambda n: n > 0, "a number of seconds > 0 (0 would busy-poll a core)"),
    "PROGRESS_THROTTLE": (lambda n: n >= 0, "a number of seconds >= 0"),
    "RETRY_BACKOFF": (lambda n: n >= 0, "a number of seconds >= 0"),
    "RETRY_BACKOFF_MAX": (lambda n: n >= 0, "a number of seconds >= 0"),
    "CLEANUP_INTERVAL": (lambda n: n > 0, "a number of seconds > 0"),
}

#: Settings that are a count of bytes or rows, from 1 to COUNT_MAX.
POSITIVE_INTS = ("RESULT_MAX_BYTES", "ARGS_MAX_BYTES", "CLEANUP_BATCH")

DOTTED_PATHS = ("STORE", "QUEUE_AUTHORIZER", "WATCH_AUTHORIZER")


@register(Tags.compatibility)
def check_sqlite_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when the workers' SQLite database lacks WAL, IMMEDIATE and a busy timeout."""
    alias = workers_settings.DATABASE
    db = settings.DATABASES.get(alias) if isinstance(alias, str) else None
    if not isinstance(db, dict) or "sqlite3" not in str(db.get("ENGINE", "")):
        return []
    options = db.get("OPTIONS") or {}
    if not isinstance(options, dict):
        return []
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
    """Report every DJANGO_WORKERS key or value that is unknown, mistyped or out of range."""
    user = getattr(settings, "DJANGO_WORKERS", {})
    if user is None:
        return []
    if not isinstance(user, dict):
        return [
            Error(
                f"DJANGO_WORKERS must be a dict, got {type(user).__name__}.",
                hint='Write DJANGO_WORKERS = {"QUEUES": {...}, ...}, or leave it out for the '
                "defaults.",
                id="django_workers.E004",
            )
        ]
    errors = _unknown_keys(user)
    errors += _dotted_paths()
    errors += _database_alias()
    errors += _listen_database()
    errors += _numbers()
    errors += _positive_ints()
    errors += _queues()
    errors += _only_listed_queues()
    errors += _retention()
    errors += _schedules()
    errors += _metrics_token()
    errors += _task_modules()
    return errors


def _unknown_keys(user: dict[Any, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key in user:
        if key in DEFAULTS:
            continue
        errors.append(
            Error(
                f"DJANGO_WORKERS has an unknown key {key!r}; it is ignored.",
                hint=_did_you_mean(key, DEFAULTS)
                + f"The keys are listed at {docs_url('reference/settings')}",
                id="django_workers.E005",
            )
        )
    return errors


def _did_you_mean(key: object, known: Any) -> str:
    close = difflib.get_close_matches(str(key).upper(), list(known), n=1)
    if not close:
        close = difflib.get_close_matches(str(key), list(known), n=1)
    return f"Did you mean {close[0]!r}? " if close else ""


def _dotted_paths() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name in DOTTED_PATHS:
        path = getattr(workers_settings, name)
        if path is None and name != "STORE":
            continue
        if not isinstance(path, str):
            problem = f"must be a dotted path string, got {type(path).__name__}"
        else:
            try:
                import_string(path)
                continue
            except ImportError as e:
                problem = f"= {path!r} cannot be imported: {e}"
        errors.append(
            Error(
                f"DJANGO_WORKERS[{name!r}] {problem}",
                hint="Give the full dotted path of an importable object, e.g. "
                f"{DEFAULTS['STORE']!r}.",
                id="django_workers.E001",
            )
        )
    return errors


def _database_alias() -> list[CheckMessage]:
    alias = workers_settings.DATABASE
    if isinstance(alias, str) and alias in settings.DATABASES:
        return []
    return [
        Error(
            f"DJANGO_WORKERS['DATABASE'] = {alias!r} is not a database alias of this site.",
            hint=f"Use one of the keys of DATABASES: {', '.join(map(repr, settings.DATABASES))}.",
            id="django_workers.E011",
        )
    ]


def _listen_database() -> list[CheckMessage]:
    """LISTEN_DATABASE: None, False or a PostgreSQL alias of the same database as DATABASE."""
    alias, main = workers_settings.LISTEN_DATABASE, workers_settings.DATABASE
    if alias is None or alias is False:
        return []
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return [
            _listen_error(
                f"= {alias!r} is not a database alias of this site.",
                "Use one of the keys of DATABASES "
                f"({', '.join(map(repr, settings.DATABASES))}), None to LISTEN through "
                "DATABASE, or False to poll without LISTEN.",
            )
        ]
    if not isinstance(main, str) or main not in settings.DATABASES:
        return []  # E011 reports it
    listen, store = settings.DATABASES[alias], settings.DATABASES[main]
    for name in (main, alias):
        if connections[name].vendor != "postgresql":
            return [
                _listen_error(
                    f"= {alias!r}, but DATABASES[{name!r}] is not PostgreSQL: only PostgreSQL "
                    "has LISTEN/NOTIFY.",
                    "Leave LISTEN_DATABASE out on other databases (workers poll there); on "
                    "PostgreSQL point it at an alias of the same database that connects "
                    "directly or through a session-mode pool.",
                )
            ]
    # Elsewhere a pooler may name the database otherwise: the runtime's probe tells.
    same_server = all(
        str(listen.get(key) or "") == str(store.get(key) or "") for key in ("HOST", "PORT")
    )
    if same_server and listen.get("NAME") != store.get("NAME"):
        return [
            _listen_error(
                f"= {alias!r} names database {listen.get('NAME')!r} on the server of "
                f"DATABASE {main!r}, which names {store.get('NAME')!r}: notices of one "
                "database never reach listeners of another.",
                f"Give DATABASES[{alias!r}] the NAME of DATABASES[{main!r}].",
            )
        ]
    return []


def _listen_error(problem: str, hint: str) -> Error:
    return Error(
        f"DJANGO_WORKERS['LISTEN_DATABASE'] {problem}",
        hint=hint + f" See {docs_url('install', 'behind-pgbouncer')}",
        id="django_workers.E020",
    )


def _is_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    # An int is finite, and math.isfinite() cannot take one too large for a float.
    return isinstance(value, int) or math.isfinite(value)


def _numbers() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name, (ok, wanted) in NUMBERS.items():
        value = getattr(workers_settings, name)
        if _is_number(value) and ok(value) and value <= SECONDS_MAX:
            continue
        errors.append(
            Error(
                f"DJANGO_WORKERS[{name!r}] must be {wanted} and at most {SECONDS_MAX} (ten "
                f"years), got {value!r}.",
                hint=f"Write a number such as {DEFAULTS[name]!r} (the default), not a string.",
                id="django_workers.E006",
            )
        )
    if errors:
        return errors
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
    return errors


def _positive_ints() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name in POSITIVE_INTS:
        value = getattr(workers_settings, name)
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= COUNT_MAX:
            continue
        errors.append(
            Error(
                f"DJANGO_WORKERS[{name!r}] must be an int from 1 to {COUNT_MAX}, got {value!r}.",
                hint=f"Write a whole number such as {DEFAULTS[name]!r} (the default).",
                id="django_workers.E007",
            )
        )
    return errors


def _queues() -> list[CheckMessage]:
    queues = workers_settings.QUEUES
    if not isinstance(queues, dict):
        return [_queue_error("DJANGO_WORKERS['QUEUES'] must be a dict of dicts.")]
    errors: list[CheckMessage] = []
    for queue, conf in queues.items():
        where = f"DJANGO_WORKERS['QUEUES'][{queue!r}]"
        if not isinstance(queue, str) or not queue:
            errors.append(_queue_error(f"{where}: a queue name must be a non-empty string."))
            continue
        if not isinstance(conf, dict):
            errors.append(_queue_error(f"{where} must be a dict, got {type(conf).__name__}."))
            continue
        for key in conf:
            if key not in QUEUE_KEYS:
                errors.append(
                    Error(
                        f"{where} has an unknown key {key!r}; it is ignored.",
                        hint=_did_you_mean(str(key).lower(), QUEUE_KEYS)
                        + f"A queue's keys are: {', '.join(sorted(QUEUE_KEYS))}.",
                        id="django_workers.E008",
                    )
                )
        errors.extend(_queue_count(where, conf, "concurrency"))
        errors.extend(_fairness(where, conf))
    return errors


def _queue_count(where: str, conf: dict[Any, Any], key: str) -> list[CheckMessage]:
    """A count of running tasks in a queue's settings: absent, or an int up to CONCURRENCY_MAX."""
    value = conf.get(key)
    if value is None or (
        isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= CONCURRENCY_MAX
    ):
        return []
    return [
        _queue_error(f"{where}[{key!r}] must be an int from 1 to {CONCURRENCY_MAX}, got {value!r}.")
    ]


def _fairness(where: str, conf: dict[Any, Any]) -> list[CheckMessage]:
    fair = conf.get("fair", False)
    if not isinstance(fair, bool):
        return [_queue_error(f"{where}['fair'] must be True or False, got {fair!r}.")]
    if conf.get("per_owner") is None:
        return []
    if count_problems := _queue_count(where, conf, "per_owner"):
        return count_problems
    if not fair:
        return [
            _queue_error(
                f"{where} has 'per_owner' but is not fair: the per-owner limit applies to a "
                "fair queue only. Add \"fair\": True, or remove 'per_owner'."
            )
        ]
    return []


def _queue_error(message: str) -> Error:
    return Error(
        message,
        hint='Map queue names to settings, e.g. {"reports": {"concurrency": 1}}; use 1 for a '
        "sequential queue, or leave concurrency out for no limit. A fair queue: "
        '{"exports": {"fair": True, "per_owner": 2}}.',
        id="django_workers.E002",
    )


def _only_listed_queues() -> list[CheckMessage]:
    value = workers_settings.ONLY_LISTED_QUEUES
    if isinstance(value, bool):
        return []
    return [
        Error(
            f"DJANGO_WORKERS['ONLY_LISTED_QUEUES'] must be True or False, got {value!r}.",
            hint="True makes submit refuse a queue that QUEUES does not name (besides 'default').",
            id="django_workers.E009",
        )
    ]


#: The shortest METRICS_TOKEN accepted: a token anyone could guess opens the metrics.
METRICS_TOKEN_MIN_LENGTH = 16


def _metrics_token() -> list[CheckMessage]:
    token = workers_settings.METRICS_TOKEN
    if token is None:
        return []
    if not isinstance(token, str):
        problem = f"must be a string or None, got {type(token).__name__}"
    elif token != token.strip() or not token.isprintable() or " " in token:
        problem = "must be printable, without spaces (it is sent in an HTTP header)"
    elif len(token) < METRICS_TOKEN_MIN_LENGTH:
        problem = f"must be at least {METRICS_TOKEN_MIN_LENGTH} characters, got {len(token)}"
    else:
        return []
    return [
        Error(
            f"DJANGO_WORKERS['METRICS_TOKEN'] {problem}.",
            hint="Use a long random secret, e.g. python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))', read from the environment; or None to open "
            "the metrics to staff only.",
            id="django_workers.E021",
        )
    ]


def _task_modules() -> list[CheckMessage]:
    prefixes = workers_settings.TASK_MODULES
    if isinstance(prefixes, list | tuple) and all(
        isinstance(p, str) and p and all(part.isidentifier() for part in p.split("."))
        for p in prefixes
    ):
        return []
    return [
        Error(
            f"DJANGO_WORKERS['TASK_MODULES'] must be a list of module names, got {prefixes!r}.",
            hint="List the module prefixes, besides installed apps, whose functions run as "
            'tasks, e.g. ["myproject.jobs"]; a worker refuses a task outside them.',
            id="django_workers.E022",
        )
    ]


def _retention() -> list[CheckMessage]:
    retention = workers_settings.RETENTION
    if not isinstance(retention, dict):
        return [_retention_error(f"must be a dict, got {type(retention).__name__}.")]
    errors: list[CheckMessage] = []
    for status, seconds in retention.items():
        if status not in RETENTION_STATUSES:
            errors.append(
                _retention_error(
                    f"names {status!r}, which is not a finished status.",
                    _did_you_mean(status, RETENTION_STATUSES),
                )
            )
        elif seconds is not None and not (_is_number(seconds) and 0 <= seconds <= SECONDS_MAX):
            errors.append(
                _retention_error(
                    f"[{status!r}] must be seconds from 0 to {SECONDS_MAX} (ten years) or None, "
                    f"got {seconds!r}."
                )
            )
    return errors


def _retention_error(problem: str, did_you_mean: str = "") -> Error:
    return Error(
        f"DJANGO_WORKERS['RETENTION'] {problem}",
        hint=did_you_mean + "Map COMPLETED, FAILED, CANCELLED or WORKFLOWS to seconds, or to "
        "None to keep those tasks (or ended workflows) forever; a key left out keeps its default.",
        id="django_workers.E012",
    )


def _schedules() -> list[CheckMessage]:
    """Every declared schedule: its entry in SCHEDULES, its task's import, no key twice."""
    from django_workers.periodic.declarations import declared, discover

    errors: list[CheckMessage] = [
        Error(
            f"{module} cannot be imported, so its @periodic schedules are unknown: {error!r}",
            hint="Fix the import error; every worker imports each app's tasks module.",
            id="django_workers.E018",
        )
        for module, error in discover()
    ]
    schedules, problems = declared()
    errors += [Error(p.message, hint=p.hint, id=p.check_id) for p in problems]
    for key, schedule in schedules.items():
        try:
            resolve(schedule.task)
        except TaskNotImportable as e:
            errors.append(
                Error(
                    f"Schedule {key!r}: {e}",
                    hint="Give the dotted path of a module-level function or Django @task.",
                    id="django_workers.E018",
                )
            )
        if schedule.options is not None:
            errors += _schedule_options(key, schedule.options)
    return errors


def _schedule_options(key: str, options: TaskOptions) -> list[CheckMessage]:
    """The exception paths of a schedule's options, imported now rather than at its first tick."""
    try:
        options.checked()
    except InvalidTaskOptions as e:
        return [
            Error(
                f"Schedule {key!r}: {e}",
                hint="Name exception classes that import, in retry_on and retry_never.",
                id="django_workers.E017",
            )
        ]
    return []
