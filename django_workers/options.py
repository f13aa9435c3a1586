"""``TaskOptions``: per-task timeout, retries and backoff, validated at submit."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from django_workers.exceptions import InvalidTaskOptions

MAX_RETRIES = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOptions:
    """How a task runs: ``timeout`` seconds (None = none), ``retries`` after a failure.

    A failed attempt waits ``retry_backoff * 2**(attempt-1)`` seconds, capped
    at ``retry_backoff_max``, with full jitter when ``retry_jitter`` is true.
    ``None`` backoffs take the DJANGO_WORKERS defaults. A timeout is never retried.
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
        """Rebuild options stored by ``to_json`` (unknown keys are ignored)."""
        known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _check_seconds(name: str, value: object, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidTaskOptions(f"{name} must be a number of seconds, got {value!r}.")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidTaskOptions(f"{name} must be a positive number of seconds, got {value!r}.")
