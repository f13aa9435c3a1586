"""``TaskOptions``: per-task timeout, retries, backoff and retry rules, validated at submit."""

from __future__ import annotations

import functools
import inspect
import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard, cast

from django.utils.module_loading import import_string

from django_workers.bounds import SECONDS_MAX, TASK_PATH_MAX_LENGTH
from django_workers.exceptions import InvalidTaskOptions

MAX_RETRIES = 100
#: The most exception classes ``retry_on`` or ``retry_never`` may list.
MAX_EXCEPTIONS = 100
#: The options that are a number of seconds.
SECONDS_OPTIONS = ("timeout", "retry_backoff", "retry_backoff_max")
#: The options that list exception classes, stored as their dotted paths.
EXCEPTION_OPTIONS = ("retry_on", "retry_never")

#: Exception classes, or their dotted paths, as ``retry_on`` and ``retry_never`` take them:
#: a list, or one alone.
ExceptionRefs = type[BaseException] | str | Sequence[type[BaseException] | str]


class _Unset:
    """The default of a field not given: ``TaskOptions`` knows which fields a caller set."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()
#: Shows a refused value in a message without repeating all of a long one.
_SHORT = reprlib.Repr(maxstring=80, maxother=80, maxlist=5)

#: Each field's value when it is not given.
DEFAULTS: Final[dict[str, Any]] = {
    "timeout": None,
    "retries": 0,
    "retry_backoff": None,
    "retry_backoff_max": None,
    "retry_jitter": True,
    "retry_on": (),
    "retry_never": (),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOptions:
    """How a task runs: ``timeout`` seconds (None = none), ``retries`` after a failure.

    A failed attempt waits ``retry_backoff * 2**(attempt-1)`` seconds, capped
    at ``retry_backoff_max``, with full jitter when ``retry_jitter`` is true.
    ``None`` backoffs take the DJANGO_WORKERS defaults. A timeout is never retried.
    Each number of seconds is at most ``bounds.SECONDS_MAX`` (ten years).

    ``retry_on`` (exception classes or their dotted paths) retries only those
    exceptions and their subclasses; ``retry_never`` never retries those. Both
    are kept as dotted paths; a submit checks that each imports to an exception
    class. ``given`` names the fields the caller set: those override a task's
    ``django_workers.task`` defaults, field by field (``dataclasses.replace``
    sets every field).
    """

    timeout: float | None = _UNSET
    retries: int = _UNSET
    retry_backoff: float | None = _UNSET
    retry_backoff_max: float | None = _UNSET
    retry_jitter: bool = _UNSET
    retry_on: ExceptionRefs = _UNSET
    retry_never: ExceptionRefs = _UNSET
    # Not compared: options of equal values are equal, however they were written.
    given: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = []
        for name, default in DEFAULTS.items():
            if getattr(self, name) is _UNSET:
                object.__setattr__(self, name, default)
            else:
                given.append(name)
        object.__setattr__(self, "given", frozenset(given))
        _check_seconds("timeout", self.timeout)
        _check_seconds("retry_backoff", self.retry_backoff, allow_zero=True)
        _check_seconds("retry_backoff_max", self.retry_backoff_max, allow_zero=True)
        if isinstance(self.retries, bool) or not isinstance(self.retries, int):
            raise InvalidTaskOptions(f"retries must be an int, got {self.retries!r}.")
        if not 0 <= self.retries <= MAX_RETRIES:
            raise InvalidTaskOptions(f"retries must be 0 to {MAX_RETRIES}, got {self.retries}.")
        if not isinstance(self.retry_jitter, bool):
            raise InvalidTaskOptions(f"retry_jitter must be a bool, got {self.retry_jitter!r}.")
        for name in EXCEPTION_OPTIONS:
            object.__setattr__(self, name, _exception_paths(name, getattr(self, name)))

    def to_json(self) -> dict[str, Any]:
        """Return the options as stored in the task record."""
        stored: dict[str, Any] = {}
        for name in DEFAULTS:
            value = getattr(self, name)
            if name in EXCEPTION_OPTIONS:
                if value:
                    stored[name] = list(value)
            elif value is not None:
                stored[name] = value
        return stored

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> TaskOptions:
        """Rebuild options stored by ``to_json`` (unknown keys are ignored).

        A record is always readable: a value stored before today's bounds reads as
        the nearest one within them, and one of no valid kind as the default.
        """
        known = {k: v for k, v in (data or {}).items() if k in DEFAULTS}
        try:
            return cls(**known)
        except InvalidTaskOptions:
            kept = {name: _within_bounds(name, value) for name, value in known.items()}
            return cls(**{name: value for name, value in kept.items() if value is not None})

    def over(self, defaults: TaskOptions | None) -> TaskOptions:
        """These options over ``defaults``: each field given here wins, the rest are theirs."""
        if defaults is None:
            return self
        fields = {name: getattr(defaults, name) for name in defaults.given}
        fields.update({name: getattr(self, name) for name in self.given})
        return TaskOptions(**fields)

    def retries_error(self, error: BaseException) -> bool:
        """Whether ``retry_on`` and ``retry_never`` let a retry follow ``error``."""
        if not self.retry_on and not self.retry_never:
            return True
        paths = {f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__}
        retry_on = cast(tuple[str, ...], self.retry_on)
        if retry_on and paths.isdisjoint(retry_on):
            return False
        return paths.isdisjoint(cast(tuple[str, ...], self.retry_never))

    def checked(self) -> TaskOptions:
        """These options with each exception path imported and named as its class is.

        InvalidTaskOptions for a path that does not import to an exception class.
        Called at submit; a worker matches the stored paths without importing them.
        """
        if not self.retry_on and not self.retry_never:
            return self
        fields = {name: getattr(self, name) for name in self.given}
        for name in EXCEPTION_OPTIONS:
            fields[name] = tuple(_exception_class_path(name, p) for p in getattr(self, name))
        checked = TaskOptions(**fields)
        object.__setattr__(checked, "given", self.given)
        return checked


# What help() and the docs show: each field's value when it is not given.
# A class has no __signature__ attribute to mypy; inspect.signature reads it all the same.
TaskOptions.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for name, default in DEFAULTS.items()
    ]
)


def _exception_paths(name: str, value: object) -> tuple[str, ...]:
    """A ``retry_on``/``retry_never`` value as a tuple of dotted paths (classes named)."""
    if isinstance(value, str) or inspect.isclass(value):
        value = (value,)  # one exception alone is taken as a list of one
    if not isinstance(value, list | tuple) or len(value) > MAX_EXCEPTIONS:
        raise InvalidTaskOptions(
            f"{name} must be a list of at most {MAX_EXCEPTIONS} exception classes or their "
            f"dotted paths, got {_SHORT.repr(value)}."
        )
    paths = []
    for ref in value:
        if inspect.isclass(ref) and issubclass(ref, BaseException):
            paths.append(f"{ref.__module__}.{ref.__qualname__}")
        elif isinstance(ref, str) and _is_dotted_path(ref):
            paths.append(ref)
        else:
            raise InvalidTaskOptions(
                f"{name} takes exception classes or their dotted paths (e.g. "
                f"'smtplib.SMTPException'), got {_SHORT.repr(ref)}."
            )
    return tuple(paths)


def _is_dotted_path(path: str) -> bool:
    # "<locals>": the path of a class defined in a function, kept as its class gave it.
    return (
        len(path) <= TASK_PATH_MAX_LENGTH
        and "." in path
        and all(part.isidentifier() or part == "<locals>" for part in path.split("."))
    )


@functools.lru_cache(maxsize=256)
def _exception_class_path(name: str, path: str) -> str:
    """The dotted path of the exception class ``path`` imports to, else InvalidTaskOptions."""
    if "<locals>" in path:
        return path  # given as a class: matched by its name, never imported
    try:
        found = import_string(path)
    except ImportError as e:
        raise InvalidTaskOptions(
            f"{name}: {path!r} does not import ({e}). Give the exception class itself, or "
            "its full dotted path, e.g. 'smtplib.SMTPException'."
        ) from e
    if not inspect.isclass(found) or not issubclass(found, BaseException):
        raise InvalidTaskOptions(
            f"{name}: {path!r} is a {type(found).__name__}, not an exception class. Give an "
            "exception class or its full dotted path, e.g. 'smtplib.SMTPException'."
        )
    return f"{found.__module__}.{found.__qualname__}"


def _within_bounds(name: str, value: Any) -> Any:
    """A stored option's value as the nearest valid one, or None for the default."""
    try:
        TaskOptions(**{name: value})
        return value
    except InvalidTaskOptions:
        pass
    if not _is_number(value) or value <= 0:
        return None
    if name in SECONDS_OPTIONS:
        return min(value, SECONDS_MAX)
    if name == "retries" and isinstance(value, int):
        return min(value, MAX_RETRIES)
    return None


def _is_number(value: object) -> TypeGuard[int | float]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    # An int is finite, and math.isfinite() cannot take one too large for a float.
    return isinstance(value, int) or math.isfinite(value)


def _check_seconds(name: str, value: object, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if not _is_number(value):
        raise InvalidTaskOptions(f"{name} must be a number of seconds, got {value!r}.")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidTaskOptions(f"{name} must be a positive number of seconds, got {value!r}.")
    if value > SECONDS_MAX:
        hint = " For no timeout, pass None." if name == "timeout" else ""
        raise InvalidTaskOptions(
            f"{name} must be at most {SECONDS_MAX} seconds (ten years), got {value!r}.{hint}"
        )
