"""Schedules declared in code: ``DJANGO_WORKERS["SCHEDULES"]`` and the ``@periodic`` decorator.

A ``Schedule`` is checked completely when it is built, so a mistake is an
``InvalidSchedule`` at the declaration (the decorator) or a system check error
(the setting), never a surprise inside a worker. The decorator adds to a
registry filled as modules are imported; ``discover()`` imports the ``tasks``
module of every installed app, so schedules declared there are known to every
worker without an import of their own.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Literal, TypeVar

from django.tasks import Task

from django_workers.authority import KEY_MAX_LENGTH, SEPARATOR, Owner
from django_workers.bounds import QUEUE_MAX_LENGTH, SECONDS_MAX
from django_workers.conf import workers_settings
from django_workers.documentation import docs_url
from django_workers.exceptions import InvalidSchedule, WorkersError
from django_workers.options import TaskOptions
from django_workers.periodic.timing import Timing, timing_of
from django_workers.references import to_json
from django_workers.submission import MAX_PRIORITY, MIN_PRIORITY

CatchUp = Literal["latest", "all", "none"]
CATCH_UP_POLICIES: tuple[CatchUp, ...] = ("latest", "all", "none")

#: Seconds: a missed tick older than this is never enqueued late (the default window).
DEFAULT_CATCH_UP_WINDOW = 3600
#: The shortest catch-up window: a tick this fresh is on time under every policy anyway.
MIN_CATCH_UP_WINDOW = 60
#: Longest schedule key: its tick's task key, ``schedule:<key>:<instant>``, must fit a key.
SCHEDULE_KEY_MAX_LENGTH = 100
#: The keys a ``DJANGO_WORKERS["SCHEDULES"]`` entry may have.
SCHEDULE_OPTIONS = frozenset(
    {
        "task",
        "cron",
        "every",
        "args",
        "kwargs",
        "queue",
        "priority",
        "options",
        "timezone",
        "catch_up",
        "catch_up_window",
        "enabled",
        "owner",
    }
)
assert len("schedule::2000-01-01T00:00:00Z") + SCHEDULE_KEY_MAX_LENGTH <= KEY_MAX_LENGTH


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """One periodic task: what to submit, when, under which authority, and after downtime."""

    key: str
    #: Dotted path of the task function (or Django ``@task``) to submit at each tick.
    task: str
    cron: str | None = None
    every: int | None = None
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    options: TaskOptions | None = None
    timezone: str = "UTC"
    catch_up: CatchUp = "latest"
    catch_up_window: int | float = DEFAULT_CATCH_UP_WINDOW
    enabled: bool = True
    #: The user id whose tasks the ticks are (``Owner(owner)``); None: ``System()``, global ids.
    owner: str | None = None

    def __post_init__(self) -> None:
        check_key(self.key)
        if not isinstance(self.task, str) or not self.task:
            raise InvalidSchedule(f'"task" must be a dotted path string, got {self.task!r}.')
        timing_of(self.cron, self.every, self.timezone)
        if self.catch_up not in CATCH_UP_POLICIES:
            raise InvalidSchedule(
                f'"catch_up" must be "latest", "all" or "none", got {self.catch_up!r}.'
            )
        window = self.catch_up_window
        if isinstance(window, bool) or not isinstance(window, int | float):
            raise InvalidSchedule(f'"catch_up_window" must be seconds, got {window!r}.')
        if not MIN_CATCH_UP_WINDOW <= window <= SECONDS_MAX:
            raise InvalidSchedule(
                f'"catch_up_window" must be from {MIN_CATCH_UP_WINDOW} to {SECONDS_MAX} seconds '
                f"(ten years), got {window!r}."
            )
        if not isinstance(self.enabled, bool):
            raise InvalidSchedule(f'"enabled" must be True or False, got {self.enabled!r}.')
        if self.owner is not None:
            _check_owner(self.owner)
        _check_queue_and_priority(self.queue, self.priority)
        if self.options is not None and not isinstance(self.options, TaskOptions):
            raise InvalidSchedule(
                f'"options" must be a TaskOptions, got {type(self.options).__name__}.'
            )
        _check_call(self.args, self.kwargs)

    @property
    def timing(self) -> Timing:
        """When this schedule ticks."""
        return timing_of(self.cron, self.every, self.timezone)

    @property
    def window(self) -> float:
        """The catch-up window in seconds."""
        return float(self.catch_up_window)


def check_key(key: object) -> str:
    """Return ``key`` if it can name a schedule, else InvalidSchedule."""
    if not isinstance(key, str) or not 1 <= len(key) <= SCHEDULE_KEY_MAX_LENGTH:
        raise InvalidSchedule(
            f"A schedule key must be a string of 1 to {SCHEDULE_KEY_MAX_LENGTH} characters, "
            f"got {key!r}."
        )
    if not key.isprintable() or any(c.isspace() for c in key) or SEPARATOR in key:
        raise InvalidSchedule(
            f"A schedule key may not contain spaces, control characters or '::', got {key!r}; "
            'use a name such as "refresh-rates".'
        )
    return key


def _check_owner(owner: object) -> None:
    if not isinstance(owner, str):
        raise InvalidSchedule(f'"owner" must be a user id string, got {owner!r}.')
    try:
        Owner(owner)
    except (WorkersError, TypeError) as e:
        raise InvalidSchedule(f'"owner": {e}') from e


def _check_queue_and_priority(queue: object, priority: object) -> None:
    if queue is not None and (
        not isinstance(queue, str)
        or not 1 <= len(queue) <= QUEUE_MAX_LENGTH
        or not queue.isprintable()
        or any(c.isspace() for c in queue)
    ):
        raise InvalidSchedule(
            f'"queue" must be a name of 1 to {QUEUE_MAX_LENGTH} characters without spaces, '
            f"got {queue!r}."
        )
    if priority is not None and (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not MIN_PRIORITY <= priority <= MAX_PRIORITY
    ):
        raise InvalidSchedule(
            f'"priority" must be an int from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority!r}.'
        )


def _check_call(args: object, kwargs: object) -> None:
    if isinstance(args, str | bytes | Mapping) or not isinstance(args, Sequence):
        raise InvalidSchedule(f'"args" must be a list or tuple, got {type(args).__name__}.')
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidSchedule('"kwargs" must be a dict with string keys.')
    try:
        to_json([list(args), dict(kwargs)], "A schedule's args and kwargs")
    except WorkersError as e:
        raise InvalidSchedule(str(e)) from e


# -- the decorator ---------------------------------------------------------------------

F = TypeVar("F", bound="Callable[..., Any] | Task[..., Any]")


class Registry:
    """The schedules ``@periodic`` declared in this process, by key."""

    def __init__(self) -> None:
        self._schedules: dict[str, Schedule] = {}
        self._lock = threading.Lock()
        #: Bumped on every change, so a scheduler knows to read the declarations again.
        self.version = 0

    def add(self, schedule: Schedule) -> None:
        """Declare ``schedule``; a key taken by another task is InvalidSchedule."""
        with self._lock:
            known = self._schedules.get(schedule.key)
            if known is not None and known.task != schedule.task:
                raise InvalidSchedule(
                    f"Schedule key {schedule.key!r} is already declared for {known.task}; "
                    f'give {schedule.task} its own key, e.g. @periodic(..., key="...").'
                )
            self._schedules[schedule.key] = schedule
            self.version += 1

    def remove(self, key: str) -> None:
        """Forget the schedule ``key`` (tests; a module that is gone)."""
        with self._lock:
            if self._schedules.pop(key, None) is not None:
                self.version += 1

    def all(self) -> dict[str, Schedule]:
        with self._lock:
            return dict(self._schedules)


registry = Registry()


def periodic(
    cron: str | None = None,
    *,
    every: int | None = None,
    key: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    options: TaskOptions | None = None,
    timezone: str = "UTC",
    catch_up: CatchUp = "latest",
    catch_up_window: float = DEFAULT_CATCH_UP_WINDOW,
    enabled: bool = True,
    owner: str | None = None,
) -> Callable[[F], F]:
    """Declare the decorated task as periodic: submitted at each tick of ``cron`` or ``every``.

    The key defaults to the task's dotted path. Every argument is checked
    here: a mistake raises InvalidSchedule where the schedule is declared.
    """
    settings: dict[str, Any] = {
        "cron": cron,
        "every": every,
        "args": tuple(args) if isinstance(args, list) else args,
        "kwargs": kwargs or {},
        "queue": queue,
        "priority": priority,
        "options": options,
        "timezone": timezone,
        "catch_up": catch_up,
        "catch_up_window": catch_up_window,
        "enabled": enabled,
        "owner": owner,
    }
    Schedule(key=key or "checked", task="checked", **settings)  # fail at the declaration

    def declare(target: F) -> F:
        path = _declared_path(target)
        registry.add(Schedule(key=key or path, task=path, **settings))
        return target

    return declare


def _declared_path(target: object) -> str:
    """The dotted path a worker will import; the module is still loading, so not resolved."""
    if isinstance(target, Task):
        return target.module_path
    name = getattr(target, "__qualname__", None)
    module = getattr(target, "__module__", None)
    if not callable(target) or not isinstance(name, str) or not isinstance(module, str):
        raise InvalidSchedule(
            f"@periodic decorates a module-level function or a Django @task, got {target!r}."
        )
    if "<" in name or "." in name:
        raise InvalidSchedule(
            f"@periodic needs a module-level function, but {module}.{name} is nested or a "
            "method; a worker could not import it. Move it to module level."
        )
    return f"{module}.{name}"


# -- DJANGO_WORKERS["SCHEDULES"] --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    """A declaration that cannot be used, as a system check reports it."""

    check_id: str
    message: str
    hint: str


def from_settings() -> tuple[dict[str, Schedule], list[Problem]]:
    """The schedules of ``DJANGO_WORKERS["SCHEDULES"]``, and the entries that are wrong."""
    value = workers_settings.SCHEDULES
    if not isinstance(value, dict):
        return {}, [_shape_problem(f"must be a dict, got {type(value).__name__}.")]
    schedules: dict[str, Schedule] = {}
    problems: list[Problem] = []
    for key, entry in value.items():
        where = f"DJANGO_WORKERS['SCHEDULES'][{key!r}]"
        if not isinstance(entry, dict):
            kind = type(entry).__name__
            problems.append(_shape_problem(f"[{key!r}] must be a dict, got {kind}."))
            continue
        unknown = sorted(str(k) for k in entry if k not in SCHEDULE_OPTIONS)
        if unknown:
            close = difflib.get_close_matches(unknown[0], SCHEDULE_OPTIONS, n=1)
            problems.append(
                Problem(
                    "django_workers.E016",
                    f"{where} has unknown keys: {', '.join(map(repr, unknown))}; the schedule is "
                    "not used.",
                    (f"Did you mean {close[0]!r}? " if close else "")
                    + f"A schedule's keys are: {', '.join(sorted(SCHEDULE_OPTIONS))}.",
                )
            )
            continue
        try:
            schedules[key] = _schedule_of(key, entry)
        except InvalidSchedule as e:
            problems.append(Problem("django_workers.E017", f"{where}: {e}", SCHEDULE_HINT))
    return schedules, problems


SCHEDULE_HINT = (
    'Write {"task": "app.tasks.name", "cron": "*/5 * * * *"} or {"task": ..., "every": 60}; '
    f"see {docs_url('periodic-tasks')}"
)


def _schedule_of(key: object, entry: dict[str, Any]) -> Schedule:
    options = entry.get("options")
    if isinstance(options, dict):
        try:
            options = TaskOptions(**options)
        except (TypeError, WorkersError) as e:
            raise InvalidSchedule(f'"options": {e}') from e
    if "task" not in entry:
        raise InvalidSchedule('"task" is missing: give the dotted path of the task to submit.')
    fields = {k: v for k, v in entry.items() if k != "options"}
    if isinstance(fields.get("args"), list):
        fields["args"] = tuple(fields["args"])
    return Schedule(key=check_key(key), options=options, **fields)


def _shape_problem(problem: str) -> Problem:
    return Problem("django_workers.E015", f"DJANGO_WORKERS['SCHEDULES'] {problem}", SCHEDULE_HINT)


def declared() -> tuple[dict[str, Schedule], list[Problem]]:
    """Every schedule declared (the setting, then ``@periodic``), and what is wrong."""
    schedules, problems = from_settings()
    for key, schedule in registry.all().items():
        if key in schedules:
            problems.append(
                Problem(
                    "django_workers.E019",
                    f"Schedule key {key!r} is declared twice: in DJANGO_WORKERS['SCHEDULES'] "
                    f"and by @periodic on {schedule.task}; the setting's is used.",
                    "Give one of them another key.",
                )
            )
            continue
        schedules[key] = schedule
    return schedules, problems


_discovery: list[tuple[str, Exception]] | None = None
_discover_lock = threading.Lock()


def discover() -> list[tuple[str, Exception]]:
    """Import each installed app's ``tasks`` module, once; the (module, error) pairs that failed."""
    global _discovery
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    with _discover_lock:
        if _discovery is None:
            failed: list[tuple[str, Exception]] = []
            for app in apps.get_app_configs():
                if app.module is None or not module_has_submodule(app.module, "tasks"):
                    continue
                try:
                    import_module(f"{app.name}.tasks")
                except Exception as e:  # reported by the caller; the other apps still load
                    failed.append((f"{app.name}.tasks", e))
            _discovery = failed
        return list(_discovery)
