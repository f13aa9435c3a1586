"""The one ``DJANGO_WORKERS`` settings dict, read lazily with documented defaults.

``workers_settings.NAME`` reads ``settings.DJANGO_WORKERS["NAME"]`` or the
default below; the cache is dropped on ``setting_changed`` so
``override_settings`` works in tests.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # Dotted path of the store every API call uses when no store= is given.
    "STORE": "django_workers.stores.database.DatabaseWorkerStore",
    # Database alias the database store writes to.
    "DATABASE": "default",
    # Database alias of the LISTEN connections on PostgreSQL: None listens through DATABASE,
    # an alias listens there (direct or session-pooled), False never LISTENs (poll).
    "LISTEN_DATABASE": None,
    # fn(queue_name, user_id) -> bool, dotted path; None disables the queue check.
    "QUEUE_AUTHORIZER": None,
    # fn(task_id, watchers, user_id) -> bool, dotted path; None denies cross-user joins.
    "WATCH_AUTHORIZER": None,
    # Per-queue settings: {"reports": {"concurrency": 1}}; concurrency is cluster-wide.
    "QUEUES": {},
    # Submit refuses a queue not named in QUEUES (or "default") when True.
    "ONLY_LISTED_QUEUES": False,
    # Largest JSON result a run may store, in bytes.
    "RESULT_MAX_BYTES": 64 * 1024,
    # Largest JSON of a task's args and kwargs together, in bytes.
    "ARGS_MAX_BYTES": 1024 * 1024,
    # Seconds between worker heartbeats, and the lease after which a silent worker is dead.
    "HEARTBEAT_INTERVAL": 5.0,
    "LEASE_TIMEOUT": 30.0,
    # Idle poll interval (seconds) where LISTEN/NOTIFY is not available.
    "POLL_INTERVAL": 0.2,
    # Minimum seconds between two stored progress writes of one run (0 = every write).
    "PROGRESS_THROTTLE": 0.0,
    # Default retry backoff: first wait, cap, in seconds.
    "RETRY_BACKOFF": 1.0,
    "RETRY_BACKOFF_MAX": 300.0,
    # Seconds finished records are kept, per status; None keeps them forever. WORKFLOWS:
    # seconds an ended workflow is kept, with its nodes' records (kept until then).
    "RETENTION": {
        "COMPLETED": 7 * 86400,
        "FAILED": 30 * 86400,
        "CANCELLED": 7 * 86400,
        "WORKFLOWS": 30 * 86400,
    },
    # Seconds between two cleanup passes, and rows deleted per batch.
    "CLEANUP_INTERVAL": 300.0,
    "CLEANUP_BATCH": 500,
    # Periodic tasks by key: {"refresh-rates": {"task": "app.tasks.f", "cron": "*/5 * * * *"}}.
    "SCHEDULES": {},
    # Module prefixes, besides the installed apps' packages, whose functions a worker may
    # run as tasks: ["myproject.jobs"]. A path outside both is refused, never imported.
    "TASK_MODULES": [],
    # A secret that opens the metrics view to "Authorization: Bearer <token>"; None: staff only.
    "METRICS_TOKEN": None,
}


#: Dict settings whose keys are merged over the defaults rather than replacing them.
MERGED = frozenset({"RETENTION"})


class WorkersSettings:
    """Attribute access to DJANGO_WORKERS with defaults.

    Each setting is declared with the type the docs give it: what a reader gets
    once the system checks pass (they report a value of another type).
    """

    STORE: str
    DATABASE: str
    LISTEN_DATABASE: str | Literal[False] | None
    QUEUE_AUTHORIZER: str | None
    WATCH_AUTHORIZER: str | None
    #: {"reports": {"concurrency": 1}}
    QUEUES: dict[str, dict[str, Any]]
    ONLY_LISTED_QUEUES: bool
    RESULT_MAX_BYTES: int
    ARGS_MAX_BYTES: int
    HEARTBEAT_INTERVAL: float
    LEASE_TIMEOUT: float
    POLL_INTERVAL: float
    PROGRESS_THROTTLE: float
    RETRY_BACKOFF: float
    RETRY_BACKOFF_MAX: float
    #: Seconds kept by finished status name (and "WORKFLOWS"); None keeps forever.
    RETENTION: dict[str, float | None]
    CLEANUP_INTERVAL: float
    CLEANUP_BATCH: int
    #: {"refresh-rates": {"task": "app.tasks.f", "cron": "*/5 * * * *"}}
    SCHEDULES: dict[str, dict[str, Any]]
    TASK_MODULES: Sequence[str]
    METRICS_TOKEN: str | None

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    if not TYPE_CHECKING:  # the checker reads the declarations above, not this

        def __getattr__(self, name: str) -> Any:
            if name not in DEFAULTS:
                raise AttributeError(f"Unknown DJANGO_WORKERS setting {name!r}")
            if name not in self._cache:
                value = user_settings().get(name, DEFAULTS[name])
                if name in MERGED and isinstance(value, dict):
                    # Naming one status keeps the defaults of the others.
                    value = {**DEFAULTS[name], **value}
                self._cache[name] = value
            return self._cache[name]

    def seconds(self, name: str, given: float | None = None) -> float:
        """``given`` when a caller passed one (a command option, say), else the setting."""
        return float(getattr(self, name) if given is None else given)

    def reload(self) -> None:
        """Forget cached values so the next read sees the current settings."""
        self._cache.clear()


workers_settings = WorkersSettings()


def user_settings() -> dict[str, Any]:
    """The site's DJANGO_WORKERS dict; anything else reads as {} (the system checks report it)."""
    user = getattr(settings, "DJANGO_WORKERS", None)
    return user if isinstance(user, dict) else {}


def queue_limits() -> dict[str, int]:
    """Cluster-wide concurrency limits from DJANGO_WORKERS['QUEUES'] (name -> most at once)."""
    queues = workers_settings.QUEUES
    if not isinstance(queues, dict):
        return {}
    return {
        name: conf["concurrency"]
        for name, conf in queues.items()
        if isinstance(conf, dict) and _is_positive_int(conf.get("concurrency"))
    }


@functools.cache  # asked at every claim; forgotten with the settings
def fair_queues() -> Mapping[str, int | None]:
    """Queues claimed fairly across owners (``"fair": True``): name -> per-owner limit or None."""
    queues = workers_settings.QUEUES
    if not isinstance(queues, dict):
        return {}
    return {
        name: conf["per_owner"] if _is_positive_int(conf.get("per_owner")) else None
        for name, conf in queues.items()
        if isinstance(conf, dict) and conf.get("fair") is True
    }


def served_fair(queues: Sequence[str] | None) -> dict[str, int | None]:
    """The fair queues (``fair_queues()``) among the queues served (None: every queue)."""
    return {q: n for q, n in fair_queues().items() if not queues or q in queues}


def served_limits(queues: Sequence[str] | None, limits: Mapping[str, int] | None) -> dict[str, int]:
    """The concurrency limits (``queue_limits()``) of the queues served (None: every queue)."""
    return {q: n for q, n in (limits or {}).items() if not queues or q in queues}


def listed_queues() -> frozenset[str] | None:
    """The queues submit accepts when ONLY_LISTED_QUEUES is on; None when every queue is."""
    if workers_settings.ONLY_LISTED_QUEUES is not True:
        return None
    queues = workers_settings.QUEUES
    return frozenset({"default", *(queues if isinstance(queues, dict) else ())})


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@receiver(setting_changed)
def _reload_workers_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "DJANGO_WORKERS":
        workers_settings.reload()
        fair_queues.cache_clear()
