"""Module-level fixture tasks the tests submit and workers run."""

from __future__ import annotations

from django.tasks import task


def add(a: int, b: int) -> int:
    return a + b


def noop() -> None:
    return None


@task
def django_add(a: int, b: int) -> int:
    return a + b


def fail() -> None:
    raise ValueError("boom")


_flaky_calls: dict[str, int] = {}


def flaky(name: str, failures: int) -> str:
    """Fail the first ``failures`` calls for ``name`` (per process), then succeed."""
    _flaky_calls[name] = _flaky_calls.get(name, 0) + 1
    if _flaky_calls[name] <= failures:
        raise RuntimeError(f"attempt {_flaky_calls[name]} fails")
    return f"ok after {_flaky_calls[name]}"


def wait_for_cancel(limit: float = 30.0) -> str:
    """Poll the token until cancelled (then raise TaskCancelled) or ``limit`` seconds pass."""
    import time

    from django_workers import current_run

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        current_run().raise_if_cancelled()
        time.sleep(0.01)
    return "not cancelled"


def ignore_cancel(seconds: float) -> str:
    """Run for ``seconds`` without ever looking at the token."""
    import time

    time.sleep(seconds)
    return "done anyway"


def with_progress(steps: int) -> int:
    from django_workers import current_run, update_progress

    for i in range(1, steps + 1):
        update_progress(current_run(), 100 * i / steps)
    return steps


def exits() -> None:
    import sys

    sys.exit(3)


def returns_unserializable() -> object:
    return object()


def big_result(size: int) -> str:
    return "x" * size


async def async_add(a: int, b: int) -> int:
    return a + b
