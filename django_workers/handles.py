"""Task handles: read, wait for, fetch and cancel one run of a task from any process.

``open_task(id, authority)`` binds a handle to the run that is current when it
is opened (its ``run_id``). A re-run replaces a finished record with a new
run; from then on the handle reports its own run as superseded and never
hands back the newer run's result.

Waiting: on PostgreSQL one LISTEN connection per process (and database) wakes
every waiting handle when a ``d:<task id>`` notification says that task ended
(migration 0002 sends it), so ``wait()`` returns within milliseconds of the
end. Elsewhere, and where that LISTEN never hears its probe (a pooler in
transaction mode), a handle polls with backoff, 10 ms doubling to 500 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, cast, overload

from asgiref.sync import sync_to_async
from django.tasks import Task

from django_workers.api import cancel_task, get_task_status, submit_task
from django_workers.authority import Authority, Owner, Scope, check_authority
from django_workers.cancellation import CancelReason, cancel_message
from django_workers.exceptions import RemoteTaskError, TaskCancelled
from django_workers.info import TaskFailure, TaskInfo, TaskStatus, class_path
from django_workers.notices import DONE_CHANNEL, ENDED, Listener, deaf_warning, parse_notice
from django_workers.options import TaskOptions
from django_workers.references import TaskRef
from django_workers.stores import WorkerStore, default_store

logger = logging.getLogger(__name__)

#: Polling without NOTIFY: the first pause, doubled up to the last, in seconds.
POLL_FIRST, POLL_MAX = 0.01, 0.5
#: With LISTEN up, the row is still re-read this often, in case a notification was lost.
NOTIFY_SAFETY_POLL = 2.0


def open_task(
    task_id: str, authority: Authority, *, store: WorkerStore | None = None
) -> TaskHandle[Any]:
    """A handle on the current run of a task the authority may see, else TaskNotFound."""
    store = store or default_store()
    return TaskHandle(get_task_status(task_id, authority, store=store), authority, store)


@overload
def submit[T](
    key: str,
    task: Task[..., T] | Callable[..., T],
    authority: Authority,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scope: Scope = "user",
    watchers: Sequence[Owner] = (),
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    options: TaskOptions | None = None,
    store: WorkerStore | None = None,
) -> TaskHandle[T]: ...


@overload
def submit(
    key: str,
    task: str,
    authority: Authority,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scope: Scope = "user",
    watchers: Sequence[Owner] = (),
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    options: TaskOptions | None = None,
    store: WorkerStore | None = None,
) -> TaskHandle[Any]: ...


def submit(
    key: str,
    task: TaskRef,
    authority: Authority,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scope: Scope = "user",
    watchers: Sequence[Owner] = (),
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    options: TaskOptions | None = None,
    store: WorkerStore | None = None,
) -> TaskHandle[Any]:
    """``submit_task`` with the same arguments, returning a handle on the run instead of the id."""
    store = store or default_store()
    task_id = submit_task(
        key,
        task,
        authority,
        args=args,
        kwargs=kwargs,
        scope=scope,
        watchers=watchers,
        queue=queue,
        priority=priority,
        run_after=run_after,
        options=options,
        store=store,
    )
    return open_task(task_id, authority, store=store)


@overload
async def asubmit[T](
    key: str,
    task: Task[..., T] | Callable[..., T],
    authority: Authority,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scope: Scope = "user",
    watchers: Sequence[Owner] = (),
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    options: TaskOptions | None = None,
    store: WorkerStore | None = None,
) -> TaskHandle[T]: ...


@overload
async def asubmit(
    key: str,
    task: str,
    authority: Authority,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scope: Scope = "user",
    watchers: Sequence[Owner] = (),
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    options: TaskOptions | None = None,
    store: WorkerStore | None = None,
) -> TaskHandle[Any]: ...


async def asubmit(
    key: str,
    task: TaskRef,
    authority: Authority,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scope: Scope = "user",
    watchers: Sequence[Owner] = (),
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    options: TaskOptions | None = None,
    store: WorkerStore | None = None,
) -> TaskHandle[Any]:
    """``submit`` from async code (an async view): the same checks and errors; a handle."""
    # Any of submit's overloads: sync_to_async's signature would take only the first.
    submitting: Callable[..., TaskHandle[Any]] = submit
    return await sync_to_async(submitting, thread_sensitive=True)(
        key,
        task,
        authority,
        args=args,
        kwargs=kwargs,
        scope=scope,
        watchers=watchers,
        queue=queue,
        priority=priority,
        run_after=run_after,
        options=options,
        store=store,
    )


class TaskHandle[T]:
    """One run of one task, as seen by an authority; made by ``open_task`` or ``submit``.

    ``T`` is the task's return type where ``submit`` was given the task itself (its
    function or Django Task); ``result()`` returns it as JSON brought it back.
    """

    def __init__(self, info: TaskInfo, authority: Authority, store: WorkerStore) -> None:
        self.id = info.id
        self.run_id = info.run_id
        self._authority = check_authority(authority)
        self._store = store
        self._seen = info
        # A run's end never changes (a re-run is another run), so it is kept once seen.
        self._final: TaskInfo | None = info if info.is_finished else None
        self._superseded = False

    def __repr__(self) -> str:
        return f"<TaskHandle {self.id!r} run {self.run_id}>"

    @property
    def superseded(self) -> bool:
        """True once a re-run is known to have replaced this handle's run before it ended."""
        return self._superseded

    def status(self) -> TaskInfo:
        """The latest snapshot of this handle's run (never a newer run's)."""
        if self._final is not None:
            return self._final
        return self._record(get_task_status(self.id, self._authority, store=self._store))

    def wait(self, timeout: float | None = None) -> TaskInfo:
        """Block until the run ends and return its final snapshot; TimeoutError after ``timeout``.

        A wait that times out leaves the task alone; ``cancel()`` stops it.
        """
        return wait_until_finished(self._store, self.id, self.status, timeout, self._late)

    def result(self, timeout: float | None = None) -> T:
        """Wait for the end; return the run's value, or raise RemoteTaskError with its error."""
        return cast(T, _value_of(self.wait(timeout)))

    def cancel(self) -> TaskInfo:
        """Cancel this run; TaskAlreadyFinished if it ended or was superseded."""
        info = cancel_task(self.id, self._authority, run_id=self.run_id, store=self._store)
        return self._record(info)

    # -- async twins --

    async def astatus(self) -> TaskInfo:
        """See status()."""
        return await sync_to_async(self.status)()

    async def await_(self, timeout: float | None = None) -> TaskInfo:
        """See wait(); suspends the coroutine instead of blocking the thread."""
        deadline = _deadline(timeout)
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        ends = _task_ends(self._store)

        def wake() -> None:
            loop.call_soon_threadsafe(woken.set)

        with _watching(ends, self.id, wake):
            pause = POLL_FIRST
            while True:
                woken.clear()
                info = await self.astatus()
                if info.is_finished:
                    return info
                step, pause = _next_pause(ends, pause)
                step = min(step, _left(deadline, timeout, self._late))
                with contextlib.suppress(TimeoutError):  # asyncio's: this pause is over
                    await asyncio.wait_for(woken.wait(), step)

    async def aresult(self, timeout: float | None = None) -> T:
        """See result()."""
        return cast(T, _value_of(await self.await_(timeout)))

    async def acancel(self) -> TaskInfo:
        """See cancel()."""
        return await sync_to_async(self.cancel)()

    # -- internals --

    def _record(self, info: TaskInfo) -> TaskInfo:
        """Keep a fresh read of the record if it is still this run; else report superseded."""
        if info.run_id != self.run_id:
            self._superseded = True
            self._final = _superseded(self._seen, info)
            return self._final
        self._seen = info
        if info.is_finished:
            self._final = info
        return info

    def _late(self, timeout: float) -> str:
        return (
            f"Task {self.id!r} did not end within {timeout:g} s; it was left alone "
            "(call cancel() to stop it)."
        )


class _Finishing(Protocol):
    @property
    def is_finished(self) -> bool: ...


def wait_until_finished[T: _Finishing](
    store: WorkerStore,
    watched_id: str,
    read: Callable[[], T],
    timeout: float | None,
    late: Callable[[float], str],
) -> T:
    """Read until ``read()`` is finished, woken by an end notice for ``watched_id`` where
    the database sends one; TimeoutError with ``late(timeout)`` after ``timeout``."""
    deadline = _deadline(timeout)
    ends = _task_ends(store)
    woken = threading.Event()
    with _watching(ends, watched_id, woken.set):
        pause = POLL_FIRST
        while True:
            woken.clear()  # before the read: an end after it sets the event again
            info = read()
            if info.is_finished:
                return info
            step, pause = _next_pause(ends, pause)
            woken.wait(min(step, _left(deadline, timeout, late)))


def _left(deadline: float | None, timeout: float | None, late: Callable[[float], str]) -> float:
    if deadline is None or timeout is None:
        return float("inf")
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(late(timeout))
    return left


def _deadline(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}.")
    return time.monotonic() + timeout


def _next_pause(ends: _TaskEnds | None, pause: float) -> tuple[float, float]:
    """How long to sleep now, and the pause after that."""
    if ends is not None and ends.listening:
        return NOTIFY_SAFETY_POLL, POLL_FIRST
    return pause, min(pause * 2, POLL_MAX)


def _value_of(info: TaskInfo) -> Any:
    if info.status == TaskStatus.COMPLETED:
        return info.result
    failure = info.error
    if failure is None:  # every end records its error; this guards older or foreign rows
        cancelled = info.status == TaskStatus.CANCELLED
        failure = TaskFailure(
            class_path(TaskCancelled) if cancelled else "",
            cancel_message(info.cancel_reason) if cancelled else f"Task ended {info.status}",
        )
    raise RemoteTaskError(failure.type, failure.message, failure.traceback)


def _superseded(own: TaskInfo, newer: TaskInfo) -> TaskInfo:
    """What a handle reports once a re-run replaced its run before it saw the end."""
    message = cancel_message(CancelReason.SUPERSEDED)
    return dataclasses.replace(
        own,
        status=TaskStatus.CANCELLED,
        cancel_reason=CancelReason.SUPERSEDED,
        result=None,
        error=TaskFailure(class_path(TaskCancelled), message),
        # Unknown exactly; the run had certainly ended when the re-run was made.
        finished_at=newer.created_at,
    )


# -- waking waiters on PostgreSQL ---------------------------------------------------------


class _TaskEnds:
    """One LISTEN connection of this process to one database; wakes handles waiting on ends."""

    def __init__(self, params: dict[str, Any], store: WorkerStore) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, list[Callable[[], None]]] = {}
        self._aliases = (store.listen_alias() or "?", getattr(store, "using", "?"))
        self._listener = Listener(
            params,
            self._on_notify,
            channel=DONE_CHANNEL,
            probe=store.send_notice,
            on_deaf=self._on_deaf,
        )
        self._listener.start()

    @property
    def listening(self) -> bool:
        return self._listener.ready.is_set()

    def add(self, task_id: str, wake: Callable[[], None]) -> None:
        with self._lock:
            self._waiters.setdefault(task_id, []).append(wake)

    def remove(self, task_id: str, wake: Callable[[], None]) -> None:
        with self._lock:
            wakes = self._waiters.get(task_id, [])
            if wake in wakes:
                wakes.remove(wake)
            if not wakes:
                self._waiters.pop(task_id, None)

    def close(self) -> None:
        self._listener.stop()
        self._listener.join(5.0)

    def _on_deaf(self) -> None:
        instead = (
            f"Handles waiting in this process poll instead ({POLL_FIRST * 1000:g} ms doubling "
            f"to {POLL_MAX:g} s)."
        )
        logger.warning(deaf_warning(*self._aliases, instead))

    def _on_notify(self, payload: str) -> None:
        notice = parse_notice(payload)
        with self._lock:
            if notice.kind == ENDED:
                wakes = list(self._waiters.get(notice.value, ()))
            elif notice.reconnected:
                # The listener (re)connected: an end sent while it was away was missed,
                # so every waiter reads its row again, now that LISTEN is in place.
                wakes = [wake for group in self._waiters.values() for wake in group]
            else:
                return
        for wake in wakes:
            wake()


_ends_lock = threading.Lock()
# (pid, database alias) -> its listener, or None where the database has no NOTIFY.
_ends: dict[tuple[int, str], _TaskEnds | None] = {}


def _task_ends(store: WorkerStore) -> _TaskEnds | None:
    """This process's end listener for the store's database; None where there is none."""
    params = store.listen_params()
    if params is None:
        return None
    # One per database; a forked child does not inherit the listener thread.
    key = (os.getpid(), repr(sorted(params.items())))
    with _ends_lock:
        if key not in _ends:
            _ends[key] = _TaskEnds(params, store)
        return _ends[key]


@contextlib.contextmanager
def _watching(ends: _TaskEnds | None, task_id: str, wake: Callable[[], None]) -> Iterator[None]:
    if ends is None:
        yield
        return
    ends.add(task_id, wake)
    try:
        yield
    finally:
        ends.remove(task_id, wake)


def close_listeners() -> None:
    """Close this process's LISTEN connections (tests do, before the test database is dropped)."""
    with _ends_lock:
        found = [ends for ends in _ends.values() if ends is not None]
        _ends.clear()
    for ends in found:
        ends.close()
