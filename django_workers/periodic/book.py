"""The schedule book: one row per declared schedule, and the write that claims a tick.

Code declares schedules; the book mirrors each declaration (for the admin and
the ``workers`` command), keeps the operators' pause switch, and records the
last tick enqueued. ``advance`` is the one write that decides who enqueues a
tick: a conditional update of ``last_tick`` from the value the caller read, so
of any number of schedulers racing for a tick exactly one matches. It runs in
the same transaction as the tick's submit, so a tick is recorded if and only
if its task was written.

``DatabaseBook`` keeps the rows in the ``ScheduleRecord`` table of the store's
database; ``MemoryBook`` keeps them in this process, beside an in-memory store.
"""

from __future__ import annotations

import abc
import copy
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django_workers.periodic.declarations import Schedule
from django_workers.stores import WorkerStore


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleState:
    """A schedule's row: its declaration as last synced, its switch and its last tick."""

    key: str
    task_path: str
    cron: str
    every: int | None
    time_zone: str
    catch_up: str
    owner: str | None
    queue: str | None
    enabled: bool
    paused: bool
    fires_after: datetime
    last_tick: datetime | None
    last_task_id: str | None

    @property
    def anchor(self) -> datetime:
        """Ticks at or before this instant are not due: the last tick, or the (re)start."""
        return max(self.fires_after, self.last_tick) if self.last_tick else self.fires_after

    @property
    def fires(self) -> bool:
        return self.enabled and not self.paused


#: The columns that mirror a declaration (the rest is the book's own state).
DECLARED = ("task_path", "cron", "every", "time_zone", "catch_up", "owner", "queue", "enabled")


def declared_columns(schedule: Schedule) -> dict[str, Any]:
    """What the row of ``schedule`` should say about its declaration."""
    return {
        "task_path": schedule.task,
        "cron": schedule.cron or "",
        "every": schedule.every,
        "time_zone": schedule.timezone,
        "catch_up": schedule.catch_up,
        "owner": schedule.owner,
        "queue": schedule.queue,
        "enabled": schedule.enabled,
    }


def is_current(state: ScheduleState, schedule: Schedule) -> bool:
    """Whether the row already says what the declaration says."""
    wanted = declared_columns(schedule)
    return all(getattr(state, name) == wanted[name] for name in DECLARED)


class ScheduleBook(abc.ABC):
    """Where the schedules' rows live; see the module docstring."""

    @abc.abstractmethod
    def read(self, keys: Iterable[str] | None = None) -> dict[str, ScheduleState]:
        """The rows of ``keys`` (every row for None), by key."""

    @abc.abstractmethod
    def sync(self, schedules: Iterable[Schedule], now: datetime) -> None:
        """Create missing rows and mirror changed declarations.

        A new row, or one whose declaration turns ``enabled`` on again, fires
        only ticks after ``now``; a row is never deleted (its last tick stays).
        """

    @abc.abstractmethod
    def advance(self, key: str, expected: datetime | None, tick: datetime, task_id: str) -> bool:
        """Record ``tick`` as enqueued, if the last tick is still ``expected`` and not paused."""

    @abc.abstractmethod
    def set_paused(self, keys: Iterable[str], paused: bool, now: datetime) -> int:
        """Pause or resume; a resumed schedule fires only ticks after ``now``. Rows changed."""

    @abc.abstractmethod
    def atomic(self) -> Any:
        """A transaction: ``advance`` and the tick's submit both happen, or neither."""


class DatabaseBook(ScheduleBook):
    """The ``ScheduleRecord`` table of a database alias."""

    def __init__(self, using: str) -> None:
        self.using = using

    def _rows(self) -> Any:
        from django_workers.models import ScheduleRecord

        return ScheduleRecord.objects.using(self.using)

    def read(self, keys: Iterable[str] | None = None) -> dict[str, ScheduleState]:
        qs = self._rows()
        if keys is not None:
            qs = qs.filter(pk__in=list(keys))
        return {row["key"]: ScheduleState(**row) for row in qs.values(*STATE_FIELDS)}

    def sync(self, schedules: Iterable[Schedule], now: datetime) -> None:
        from django_workers.models import ScheduleRecord

        wanted = {s.key: s for s in schedules}
        rows = self.read(wanted)
        new = [
            ScheduleRecord(key=key, fires_after=now, created_at=now, **declared_columns(s))
            for key, s in wanted.items()
            if key not in rows
        ]
        if new:
            self._rows().bulk_create(new, ignore_conflicts=True)
        for key, state in rows.items():
            schedule = wanted[key]
            if is_current(state, schedule):
                continue
            columns = declared_columns(schedule)
            if schedule.enabled:
                # Conditional, so only the scheduler that turns it on moves fires_after.
                self._rows().filter(pk=key, enabled=False).update(fires_after=now, **columns)
            self._rows().filter(pk=key).update(**columns)

    def advance(self, key: str, expected: datetime | None, tick: datetime, task_id: str) -> bool:
        return bool(self._rows().advance(key, expected, tick, task_id))

    def set_paused(self, keys: Iterable[str], paused: bool, now: datetime) -> int:
        return int(self._rows().set_paused(list(keys), paused, now))

    def atomic(self) -> Any:
        from django.db import transaction

        return transaction.atomic(using=self.using)


STATE_FIELDS = tuple(ScheduleState.__dataclass_fields__)


class MemoryBook(ScheduleBook):
    """Rows in this process's memory, for a store that keeps its tasks there too."""

    def __init__(self) -> None:
        self._rows: dict[str, ScheduleState] = {}
        self._lock = threading.RLock()

    def read(self, keys: Iterable[str] | None = None) -> dict[str, ScheduleState]:
        with self._lock:
            if keys is None:
                return dict(self._rows)
            return {k: self._rows[k] for k in keys if k in self._rows}

    def sync(self, schedules: Iterable[Schedule], now: datetime) -> None:
        with self._lock:
            for schedule in schedules:
                state = self._rows.get(schedule.key)
                columns = declared_columns(schedule)
                if state is None:
                    self._rows[schedule.key] = ScheduleState(
                        key=schedule.key,
                        paused=False,
                        fires_after=now,
                        last_tick=None,
                        last_task_id=None,
                        **columns,
                    )
                elif not is_current(state, schedule):
                    if schedule.enabled and not state.enabled:
                        state = replace(state, fires_after=now)
                    self._rows[schedule.key] = replace(state, **columns)

    def advance(self, key: str, expected: datetime | None, tick: datetime, task_id: str) -> bool:
        with self._lock:
            state = self._rows.get(key)
            if state is None or state.paused or state.last_tick != expected:
                return False
            self._rows[key] = replace(state, last_tick=tick, last_task_id=task_id)
            return True

    def set_paused(self, keys: Iterable[str], paused: bool, now: datetime) -> int:
        changed = 0
        with self._lock:
            for key in keys:
                state = self._rows.get(key)
                if state is None or state.paused == paused:
                    continue
                fires_after = state.fires_after if paused else now
                self._rows[key] = replace(state, paused=paused, fires_after=fires_after)
                changed += 1
        return changed

    @contextmanager
    def atomic(self) -> Iterator[None]:
        with self._lock:
            saved = copy.copy(self._rows)
            try:
                yield
            except BaseException:
                self._rows = saved
                raise


_memory_books: weakref.WeakKeyDictionary[WorkerStore, MemoryBook] = weakref.WeakKeyDictionary()
_memory_lock = threading.Lock()


def book_for(store: WorkerStore) -> ScheduleBook:
    """The book beside ``store``: its database's table, or one in memory per volatile store."""
    using = getattr(store, "using", None)
    if store.durable and isinstance(using, str):
        return DatabaseBook(using)
    with _memory_lock:
        book = _memory_books.get(store)
        if book is None:
            book = _memory_books[store] = MemoryBook()
        return book
