"""Module-level fixture tasks the tests submit and workers run."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

# A function of another module, imported into this installed app's module: a path naming
# it here (tests.tasks.getoutput) is no task, and is refused.
from subprocess import getoutput  # noqa: F401
from typing import Any

from django.tasks import TaskContext, task

import django_workers


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


def creep_until_cancelled(step: float = 0.25, limit: float = 60.0) -> str:
    """Report one more percent every ``step`` seconds (up to 99) until cancelled."""
    import time

    from django_workers import current_run, update_progress

    deadline = time.monotonic() + limit
    pct = 0
    while time.monotonic() < deadline:
        current_run().raise_if_cancelled()
        pct = min(pct + 1, 99)
        update_progress(current_run(), pct)
        time.sleep(step)
    return "not cancelled"


def counted_wait_for_cancel(name: str) -> str:
    """Count the call in ``calls[name]`` (the sign it started), then ``wait_for_cancel()``."""
    with _lock:
        calls[name] += 1
    return wait_for_cancel()


def record_start() -> None:
    """Insert an ``Execution`` row for this run: the sign, seen from another process, it began."""
    import os

    from django.utils import timezone

    from django_workers import current_run
    from tests.models import Execution

    Execution.objects.create(task_id=current_run().id, pid=os.getpid(), started_at=timezone.now())


def started_then_wait_for_cancel(limit: float = 30.0) -> str:
    """``record_start()``, then ``wait_for_cancel(limit)``."""
    record_start()
    return wait_for_cancel(limit)


def started_then_ignore_cancel(seconds: float) -> str:
    """``record_start()``, then ``ignore_cancel(seconds)``."""
    record_start()
    return ignore_cancel(seconds)


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


# -- hostile tasks: each must end its record FAILED and leave its worker serving --


def os_exits() -> None:
    """End the worker process at once, as a crash would: no exception, no cleanup."""
    import os

    os._exit(7)


def recurses(depth: int = 0) -> int:
    """Recurse without end, until RecursionError."""
    return recurses(depth + 1) + 1


def returns_lone_surrogate() -> str:
    return "half of a pair: \ud800"


def returns_too_deep() -> list[Any]:
    """A value nested more deeply than a JSON encoder goes."""
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    return deep


class Unprintable(Exception):
    """An exception whose text cannot be made."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def raises_unprintable() -> None:
    raise Unprintable()


def raises_huge_message() -> None:
    raise ValueError("m" * 10_000_000 + " \ud800 \x00 end")


def big_result(size: int) -> str:
    return "x" * size


async def async_add(a: int, b: int) -> int:
    return a + b


async def async_progress_until_cancelled(name: str, limit: float = 30.0) -> str:
    """Report 50 % the async way, then poll the token until cancelled or ``limit`` passes."""
    import asyncio
    import time

    from django_workers import aupdate_progress, current_run

    run = current_run()
    seen[name].append(run.id)
    await aupdate_progress(run, 50)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        current_run().raise_if_cancelled()
        await asyncio.sleep(0.01)
    return "not cancelled"


async def async_sync_progress() -> None:
    """Call the synchronous ``update_progress`` from the event loop (refused)."""
    from django_workers import current_run, update_progress

    update_progress(current_run(), 50)


# -- coordination with a runtime in the test process (module state is per process) --

_lock = threading.Lock()
_gates: dict[str, threading.Event] = {}
#: Calls of a named fixture task so far.
calls: Counter[str] = Counter()
#: What a named task saw or did, in order (labels, cancel reasons, ...).
seen: defaultdict[str, list[Any]] = defaultdict(list)
_in_flight: Counter[str] = Counter()
#: The most runs of one name that were executing at once.
peak: Counter[str] = Counter()


def gate(name: str) -> threading.Event:
    """The event that releases the ``held`` runs of ``name``."""
    with _lock:
        return _gates.setdefault(name, threading.Event())


def reset_coordination() -> None:
    with _lock:
        for event in _gates.values():
            event.set()  # never leave a run thread parked on a gate
        _gates.clear()
        calls.clear()
        seen.clear()
        _in_flight.clear()
        peak.clear()


def held(name: str, outcome: str = "return", limit: float = 30.0) -> str:
    """Wait, ignoring the token, until the test opens ``gate(name)``; then end as ``outcome``.

    ``outcome``: "return" returns normally, "raise" raises, "check" calls
    ``raise_if_cancelled()`` (recording the reason it finds) and then returns.
    """
    from django_workers import TaskCancelled, current_run

    with _lock:
        calls[name] += 1
    gate(name).wait(limit)
    if outcome == "raise":
        raise RuntimeError(f"{name} gave up")
    if outcome == "check":
        try:
            current_run().raise_if_cancelled()
        except TaskCancelled as e:
            seen[name].append(e.reason)
            raise
    return "released"


def fail_counting(name: str) -> None:
    with _lock:
        calls[name] += 1
    raise ValueError(f"{name} failed")


def record(name: str, label: str, hold: float = 0.0) -> str:
    """Log ``label`` under ``name`` and track how many runs of ``name`` overlap."""
    import time

    with _lock:
        seen[name].append(label)
        _in_flight[name] += 1
        peak[name] = max(peak[name], _in_flight[name])
    try:
        time.sleep(hold)  # work, so that overlapping runs would show
    finally:
        with _lock:
            _in_flight[name] -= 1
    return label


def progress_then_hold(name: str, first: float, late: float) -> str:
    """Report ``first``, wait for the gate, then report ``late`` (maybe after losing the run)."""
    from django_workers import current_run, update_progress

    update_progress(current_run(), first)
    with _lock:
        calls[name] += 1
    gate(name).wait(30.0)
    update_progress(current_run(), late)
    return "reported"


def fails_with_nul() -> None:
    raise ValueError("bad byte \x00 in a message")


def returns_nul() -> str:
    return "nul \x00 inside"


# -- tasks for worker subprocesses: state lives in files and tables, not in memory --


def wait_for_cancel_marked(path: str, limit: float = 30.0) -> str:
    """Like ``wait_for_cancel``, but first write the reason it was stopped for to ``path``."""
    import time
    from pathlib import Path

    from django_workers import TaskCancelled, current_run

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            current_run().raise_if_cancelled()
        except TaskCancelled as e:
            Path(path).write_text(e.reason)
            raise
        time.sleep(0.01)
    return "not cancelled"


def hang_on_first_attempt(limit: float = 30.0) -> str:
    """Hang (ignoring the token) on attempt 1; succeed on any later attempt."""
    import time

    from django_workers import current_run

    attempt = current_run().attempts
    if attempt == 1:
        time.sleep(limit)
    return f"done on attempt {attempt}"


def fail_until_attempt(n: int) -> int:
    from django_workers import current_run

    attempt = current_run().attempts
    if attempt < n:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


def record_execution(hold: float = 0.0) -> int:
    """Insert one ``Execution`` row for this run (when it started and ended) and return the pid."""
    import os

    from django.utils import timezone

    from django_workers import current_run
    from tests.models import Execution

    row = Execution.objects.create(
        task_id=current_run().id, pid=os.getpid(), started_at=timezone.now()
    )
    # Not time.sleep: under faketime (libfaketime 0.9.10) with a real monotonic clock it
    # fails with EINVAL, and the clock-skew tests run this task in such a worker.
    threading.Event().wait(hold)
    Execution.objects.filter(pk=row.pk).update(finished_at=timezone.now())
    return os.getpid()


# -- django.tasks fixtures: @task functions enqueued through WorkersBackend ("workers") --


@task(backend="workers")
def dj_noop(*args: Any, **kwargs: Any) -> None:
    return None


@task(backend="workers")
async def dj_noop_async(*args: Any, **kwargs: Any) -> None:
    return None


@task(backend="workers")
def dj_meaning_of_life() -> int:
    return 42


@task(backend="workers")
async def dj_async_add(a: int, b: int) -> int:
    import asyncio

    await asyncio.sleep(0)
    return a + b


@task(backend="workers")
def dj_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task(backend="workers")
def dj_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task(backend="workers")
def dj_complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task(backend="workers")
def dj_unserializable_result() -> object:
    return object()


@task(backend="workers", takes_context=True)
def dj_get_task_id(context: TaskContext) -> str:
    return context.task_result.id


@task(backend="workers", takes_context=True)
async def dj_async_get_task_id(context: TaskContext) -> str:
    return context.task_result.id


@task(backend="workers", takes_context=True)
def dj_context(context: TaskContext, attempt: int) -> dict[str, Any]:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt
    result = context.task_result
    return {"status": result.status, "backend": result.backend, "args": result.args}


@task(backend="workers")
def dj_wait_for_cancel(limit: float = 30.0) -> str:
    return wait_for_cancel(limit)


@task(backend="workers")
def dj_held(name: str) -> str:
    return held(name)


@task(backend="workers")
def dj_sleep(seconds: float) -> str:
    """Sleep ``seconds`` without looking at the token."""
    import time

    time.sleep(seconds)
    return "slept"


@task(backend="workers", takes_context=True)
def dj_fail_every_attempt(context: TaskContext) -> None:
    raise RuntimeError(f"attempt {context.attempt} fails")


# -- run in the test's own thread by django_workers.testing ------------------------------------


def submits_child(key: str) -> str:
    """Submit ``add(2, 3)`` under ``key`` and return its task id."""
    from django_workers import System, submit_task

    return submit_task(key, add, System(), args=[2, 3], scope="global")


def resubmits_itself(n: int) -> None:
    """Submit the next of an endless chain of itself."""
    from django_workers import System, submit_task

    submit_task(f"chain-{n + 1}", resubmits_itself, System(), args=[n + 1], scope="global")


def cancels_itself() -> str:
    """Cancel this task through the public API, then stop at the next check."""
    from django_workers import System, cancel_task, current_run

    cancel_task(current_run().id, System())
    current_run().raise_if_cancelled()
    return "not cancelled"


def progress_as_stored(pct: float) -> float:
    """Report ``pct``, then return the progress the store holds for this task."""
    from django_workers import System, current_run, get_task_status, update_progress

    update_progress(current_run(), pct)
    return get_task_status(current_run().id, System()).progress


def current_task_id() -> str:
    from django_workers import current_run

    return current_run().id


# -- workflow nodes -----------------------------------------------------------------------


def wf_sum(*names: str) -> int:
    """Record this run, then return the sum of the results of the nodes ``names``."""
    from django_workers import current_run

    record_execution()
    workflow = current_run().workflow
    return sum(workflow.result(name) for name in names)  # type: ignore[union-attr]


def wf_outcomes(*names: str) -> dict[str, str]:
    """Record this run, then return how each node of ``names`` ended (an .always() node)."""
    from django_workers import current_run

    record_execution()
    workflow = current_run().workflow
    return {name: workflow.outcome(name) for name in names}  # type: ignore[union-attr]


def wf_value(value: int, hold: float = 0.0) -> int:
    """Record this run (held ``hold`` seconds) and return ``value``."""
    record_execution(hold)
    return value


def wf_value_once_fixed(value: int, fixed: str) -> int:
    """Record this run, then fail until the file ``fixed`` exists; then return ``value``."""
    import os

    record_execution()
    if not os.path.exists(fixed):
        raise RuntimeError(f"{fixed} is missing: not fixed yet")
    return value


def wf_fail() -> None:
    """Record this run, then fail."""
    record_execution()
    raise ValueError("node failed")


def wf_read(name: str) -> dict[str, Any]:
    """What ``current_run().workflow`` says of node ``name``, errors included, as JSON."""
    from django_workers import RemoteTaskError, current_run

    workflow = current_run().workflow
    seen: dict[str, Any] = {"id": str(workflow), "outcome": workflow.outcome(name)}  # type: ignore[union-attr]
    seen["failed"] = workflow.failed(name)  # type: ignore[union-attr]
    try:
        seen["result"] = workflow.result(name)  # type: ignore[union-attr]
    except RemoteTaskError as e:
        seen["error"] = f"{e.type_name}: {e.message}"
    try:
        workflow.result("nowhere")  # type: ignore[union-attr]
    except LookupError as e:
        seen["unknown"] = str(e)
    return seen


# -- the fault suite (tests/faults): each execution is a row of the ledger, Execution --------


def _ledger_start() -> Any:
    """Insert this execution's ledger row (an ORM write on the run thread's connection)."""
    import os

    from django.utils import timezone

    from django_workers import current_run
    from tests.models import Execution

    run = current_run()
    return Execution.objects.create(
        task_id=run.id,
        run_id=run.run_id,
        attempt=run.attempts,
        worker_id=run.worker_id or "",
        pid=os.getpid(),
        started_at=timezone.now(),
    )


def _ledger_finish(row: Any) -> None:
    from django.utils import timezone

    from tests.models import Execution

    Execution.objects.filter(pk=row.pk).update(finished_at=timezone.now())


def fault_work(hold: float = 0.0, finish: bool = True) -> int:
    """Record this execution in the ledger, work ``hold`` seconds, record its end; the pid.

    Both records are ORM writes (an insert, an update) on the run thread's own
    connection, so a task hit by a dropped connection fails its attempt. With
    ``finish=False`` it returns without touching the database again: a function
    that can end while the database is away (its ledger row keeps no end).
    """
    import os

    row = _ledger_start()
    # Not time.sleep, as in record_execution: safe under faketime too.
    threading.Event().wait(hold)
    if finish:
        _ledger_finish(row)
    return os.getpid()


def fault_fail(hold: float = 0.0) -> None:
    """Like ``fault_work(hold)``, then raise: a workflow node or undo that fails."""
    row = _ledger_start()
    threading.Event().wait(hold)
    _ledger_finish(row)
    raise ValueError("this step fails on purpose")


def retry_once_after(seconds: float) -> int:
    """Ask for a retry ``seconds`` later on attempt 1 (``Retry(after=...)``); return the attempt."""
    from django_workers import Retry, current_run

    attempt = current_run().attempts
    if attempt == 1:
        raise Retry("the service said: try again later", after=seconds)
    return attempt


def retry_from_lookup_error() -> None:
    """Ask for a retry because of a LookupError, every time: with none left, it fails with it."""
    from django_workers import Retry

    try:
        raise LookupError("the row is not there yet")
    except LookupError as e:
        raise Retry(after=0.05) from e


def undo_that_hangs_first(limit: float = 30.0) -> str:
    """An undo step that records its execution, hangs on attempt 1, and completes after."""
    from django_workers import current_run

    record_start()
    attempt = current_run().attempts
    if attempt == 1:
        threading.Event().wait(limit)
    return f"undone on attempt {attempt}"


def return_early_when_asked(name: str, limit: float = 30.0) -> str:
    """Count the call, then return (not raise) as soon as ``cancel_requested`` says so."""
    import time

    from django_workers import cancel_requested, current_run

    with _lock:
        calls[name] += 1
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cancel_requested(current_run()):
            return "stopped early"
        time.sleep(0.01)
    return "ran to its end"


# -- django_workers.task: defaults declared next to the function ---------------------------


@django_workers.task
def declared_add(a: int, b: int) -> int:
    """Declared bare: no options of its own, a Django Task all the same."""
    return a + b


@django_workers.task(backend="workers", retries=2, retry_backoff=0.05, retry_jitter=False)
def declared_flaky() -> int:
    """Fail attempts 1 and 2, succeed on the third (its declared retries allow two more)."""
    from django_workers import current_run

    attempt = current_run().attempts
    if attempt < 3:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


class ServiceDown(ConnectionError):
    """A failure worth trying again: retry_on names its base class."""


@django_workers.task(
    retries=3, retry_backoff=0.05, retry_jitter=False, retry_on=[ConnectionError], timeout=60
)
def retried_on_connection_errors(kind: str) -> int:
    """Raise ``kind`` ("down": ServiceDown, "bad": ValueError) on attempt 1; then return it."""
    from django_workers import current_run

    attempt = current_run().attempts
    if attempt == 1:
        raise ServiceDown("the service is down") if kind == "down" else ValueError("bad data")
    return attempt


@django_workers.task(retries=3, retry_backoff=0.05, retry_never=["builtins.KeyError"])
def never_retried_on_key_errors() -> None:
    """Raise KeyError, which its declaration never retries (a LookupError is retried)."""
    raise KeyError("no such row")


@django_workers.task(retries=1, retry_backoff=0.05, retry_on=[LookupError])
def asks_for_a_retry() -> int:
    """Raise Retry on attempt 1, which retries whatever retry_on says."""
    from django_workers import Retry, current_run

    attempt = current_run().attempts
    if attempt == 1:
        raise Retry("not ready", after=0.05)
    return attempt
