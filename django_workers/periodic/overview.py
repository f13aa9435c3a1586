"""What an operator sees of the schedules: each one's state, next tick, last tick and its task."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django_workers import clock
from django_workers.api import get_task_status
from django_workers.authority import System
from django_workers.exceptions import InvalidSchedule, TaskNotFound
from django_workers.periodic.book import ScheduleState, book_for
from django_workers.periodic.declarations import Schedule, declared, discover
from django_workers.periodic.timing import describe, timing_of
from django_workers.stores import WorkerStore


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleView:
    """One schedule as the ``workers schedules`` command and the admin show it."""

    key: str
    task: str
    timing: str
    catch_up: str
    owner: str | None
    #: "enabled", "paused" (the admin switch), "disabled" (in code), or "not declared".
    state: str
    next_tick: datetime | None
    last_tick: datetime | None
    last_task_id: str | None
    #: The status of the last tick's task; "deleted" once retention removed it.
    last_status: str | None


def state_of(row: ScheduleState | None, schedule: Schedule | None) -> str:
    """How a schedule stands: declared or not, disabled in code, paused, else enabled."""
    if schedule is None:
        return "not declared"
    if not schedule.enabled:
        return "disabled"
    return "paused" if row is not None and row.paused else "enabled"


def next_tick(
    row: ScheduleState | None, cron: str | None, every: int | None, zone: str, now: datetime
) -> datetime | None:
    """The next tick a worker will enqueue, from a row's timing (None when none will)."""
    try:
        timing = timing_of(cron or None, every, zone)
    except InvalidSchedule:
        return None
    after = max(now, row.anchor) if row is not None else now
    return timing.next_after(after)


def schedule_overview(store: WorkerStore, now: datetime | None = None) -> list[ScheduleView]:
    """Every declared schedule, and every row no longer declared, by key."""
    discover()
    schedules, _problems = declared()
    rows = book_for(store).read()
    now = now or clock.now()
    views = []
    for key in sorted(set(schedules) | set(rows)):
        schedule, row = schedules.get(key), rows.get(key)
        state = state_of(row, schedule)
        catch_up: str
        if schedule is not None:
            cron, every, zone = schedule.cron, schedule.every, schedule.timezone
            task, catch_up, owner = schedule.task, schedule.catch_up, schedule.owner
        else:
            assert row is not None
            cron, every, zone = row.cron or None, row.every, row.time_zone
            task, catch_up, owner = row.task_path, row.catch_up, row.owner
        views.append(
            ScheduleView(
                key=key,
                task=task,
                timing=describe(cron, every, zone),
                catch_up=catch_up,
                owner=owner,
                state=state,
                next_tick=next_tick(row, cron, every, zone, now) if state == "enabled" else None,
                last_tick=row.last_tick if row else None,
                last_task_id=row.last_task_id if row else None,
                last_status=_status(store, row.last_task_id if row else None),
            )
        )
    return views


def _status(store: WorkerStore, task_id: str | None) -> str | None:
    if task_id is None:
        return None
    try:
        return str(get_task_status(task_id, System(), store=store).status)
    except TaskNotFound:
        return "deleted"
