"""``TaskOptions``: per-task timeout, retries and backoff, validated at submit."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, TypeGuard

from django_workers.bounds import SECONDS_MAX
from django_workers.exceptions import InvalidTaskOptions

MAX_RETRIES = 100
#: The options that are a number of seconds.
SECONDS_OPTIONS = ("timeout", "retry_backoff", "retry_backoff_max")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOptions:
    """How a task runs: ``timeout`` seconds (None = none), ``retries`` after a failure.

    A failed attempt waits ``retry_backoff * 2**(attempt-1)`` seconds, capped
    at ``retry_backoff_max``, with full jitter when ``retry_jitter`` is true.
    ``None`` backoffs take the DJANGO_WORKERS defaults. A timeout is never retried.
    Each number of seconds is at most ``bounds.SECONDS_MAX`` (ten years).
    """

    timeout: float | None = None
    retries: int = 0
    retry_backoff: float | None = None
    retry_backoff_max: float | None = None
    retry_jitter: bool = True

    def __post_init__(self) -> None:
        _check_seconds("timeout", self.timeout)
        _check_seconds("retry_backoff", self.retry_backoff, allow_zero=True)
        _check_seconds("retry_backoff_max", self.retry_backoff_max, allow_zero=True)
        if isinstance(self.retries, bool) or not isinstance(self.retries, int):
            raise InvalidTaskOptions(f"retries must be an int, got {self.retries!r}.")
        if not 0 <= self.retries <= MAX_RETRIES:
            raise InvalidTaskOptions(f"retries must be 0 to {MAX_RETRIES}, got {self.retries}.")
        if not isinstance(self.retry_jitter, bool):
            raise InvalidTaskOptions(f"retry_jitter must be a bool, got {self.retry_jitter!r}.")

    def to_json(self) -> dict[str, Any]:
        """Return the options as stored in the task record."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> TaskOptions:
        """Rebuild options stored by ``to_json`` (unknown keys are ignored).

        A record is always readable: a value stored before today's bounds reads as
        the nearest one within them, and one of no valid kind as the default.
        """
        known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        try:
            return cls(**known)
        except InvalidTaskOptions:
            kept = {name: _within_bounds(name, value) for name, value in known.items()}
            return cls(**{name: value for name, value in kept.items() if value is not None})


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
