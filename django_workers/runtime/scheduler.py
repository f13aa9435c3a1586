"""The scheduler pass every runtime runs: enqueue each due tick of each declared schedule once.

There is no leader and no separate process: every ``runworkers`` runs this
pass from its housekeeping thread, about twice a second. A pass costs no query
until the next tick of some schedule is due; then it reads the schedule rows
and, for each schedule with due ticks, claims them with the book's conditional
``advance`` and submits them in the same transaction. A scheduler that loses
the race submits nothing, so each tick is one task record and one run. Its task
id is derived from the schedule key and the tick's UTC instant
(``schedule:<key>:<instant>``), global under ``System()`` or scoped to the
schedule's owner.

A pass that fails (the database, an authorizer that refuses, a task that does
not import) logs and tries again a few seconds later; it never stops a worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError

from django_workers import clock
from django_workers.api import submit_tasks
from django_workers.authority import Authority, Owner, Scope, System, scoped_task_key
from django_workers.conf import workers_settings
from django_workers.periodic.book import ScheduleBook, ScheduleState, book_for
from django_workers.periodic.declarations import Problem, Schedule, declared, discover, registry
from django_workers.periodic.policy import plan_ticks, tick_key
from django_workers.stores import WorkerStore
from django_workers.submission import TaskSubmission

logger = logging.getLogger(__name__)

#: How long a schedule whose ticks could not be enqueued waits before the next try.
RETRY_AFTER = timedelta(seconds=5)
#: The most skipped ticks remembered as already logged.
TOLD_MAX = 10_000
#: How long a pass waits when no schedule has a next tick (all disabled, or never again).
IDLE_RECHECK = timedelta(minutes=5)

Report = Callable[..., None]


def _log_now(method: Callable[..., None], *args: Any) -> None:
    method(*args)


class Scheduler:
    """Runs scheduler passes for one runtime over ``store``; see the module docstring."""

    def __init__(self, store: WorkerStore, report: Report = _log_now) -> None:
        self.store = store
        self.book: ScheduleBook = book_for(store)
        self._report = report
        #: Nothing is due before this instant, as of the last pass (None: look now).
        self._quiet_until: datetime | None = None
        self._declared: dict[str, Schedule] = {}
        #: The SCHEDULES value and registry version the declarations were read from.
        self._seen: tuple[object, int] | None = None
        self._synced = False
        #: (key, tick) already reported as skipped, so a skip is logged once.
        self._told: set[tuple[str, datetime]] = set()
        for module, error in discover():
            self._report(logger.error, "Could not import %s for its schedules: %r", module, error)

    def run_pass(self, now: datetime | None = None) -> list[str]:
        """Enqueue every due tick; return the ids of the tasks this pass created."""
        schedules = self._schedules()
        if not schedules:
            return []
        now = now or clock.now()
        if self._quiet_until is not None and now < self._quiet_until:
            return []
        try:
            if not self._synced:
                self.book.sync(schedules.values(), now)
                self._synced = True
            rows = self.book.read(schedules)
        except DatabaseError as e:
            self._report(logger.warning, "Scheduler could not read the schedules (%s)", e)
            self.store.reset_connection()
            self._quiet_until = now + RETRY_AFTER
            return []
        created: list[str] = []
        wake: list[datetime] = []
        for key, schedule in schedules.items():
            row = rows.get(key)
            if row is None:
                self._synced = False  # deleted under us: recreated by the next pass
                continue
            if not schedule.enabled:
                continue  # only a change of the declarations brings it back
            try:
                created += self._fire(schedule, row, now)
            except Exception as e:  # one schedule's trouble never stops the others
                self._report(logger.error, "Schedule %s: could not enqueue its tick: %r", key, e)
                if isinstance(e, DatabaseError):
                    self.store.reset_connection()
                wake.append(now + RETRY_AFTER)
                continue
            upcoming = schedule.timing.next_after(now)
            if upcoming is not None:
                wake.append(upcoming)
        self._quiet_until = min(wake, default=now + IDLE_RECHECK)
        return created

    def _schedules(self) -> dict[str, Schedule]:
        """Every declaration, read again when the settings or the registry change."""
        seen = (workers_settings.SCHEDULES, registry.version)
        if self._seen is None or seen[0] is not self._seen[0] or seen[1] != self._seen[1]:
            schedules, problems = declared()
            self._report_problems(problems)
            self._declared, self._seen = schedules, seen
            self._synced = False
            self._quiet_until = None
        return self._declared

    def _report_problems(self, problems: list[Problem]) -> None:
        for problem in problems:
            report = (problem.message, problem.check_id, problem.hint)
            self._report(logger.error, "%s (%s) %s", *report)

    def _fire(self, schedule: Schedule, row: ScheduleState, now: datetime) -> list[str]:
        if not schedule.enabled or row.paused:
            return []
        plan = plan_ticks(schedule.timing, schedule.catch_up, schedule.window, row.anchor, now)
        self._tell_skipped(schedule, plan.skipped)
        if not plan.enqueue:
            return []
        authority, scope = _authority_of(schedule)
        specs = [_submission(schedule, tick, scope) for tick in plan.enqueue]
        newest = scoped_task_key(specs[-1].key, authority, scope)
        with self.book.atomic():
            if not self.book.advance(schedule.key, row.last_tick, plan.enqueue[-1], newest):
                return []  # another scheduler enqueued these ticks, or the schedule was paused
            ids = submit_tasks(specs, authority, store=self.store)
        for tick, task_id in zip(plan.enqueue, ids, strict=True):
            self._report(
                logger.info, "Schedule %s: tick %s enqueued as task %s", schedule.key, tick, task_id
            )
        return ids

    def _tell_skipped(self, schedule: Schedule, skipped: tuple[datetime, ...]) -> None:
        fresh = [tick for tick in skipped if (schedule.key, tick) not in self._told]
        if not fresh:
            return
        if len(self._told) > TOLD_MAX:
            self._told.clear()  # ticks told long ago are out of every window by now
        self._told.update((schedule.key, tick) for tick in fresh)
        self._report(
            logger.warning,
            "Schedule %s: %d missed tick(s) not enqueued (catch_up=%r), the newest %s",
            schedule.key,
            len(fresh),
            schedule.catch_up,
            fresh[-1],
        )


def _authority_of(schedule: Schedule) -> tuple[Authority, Scope]:
    if schedule.owner is None:
        return System(), "global"
    return Owner(schedule.owner), "user"


def _submission(schedule: Schedule, tick: datetime, scope: Scope) -> TaskSubmission:
    return TaskSubmission(
        key=tick_key(schedule.key, tick),
        task=schedule.task,
        args=schedule.args,
        kwargs=schedule.kwargs,
        scope=scope,
        queue=schedule.queue,
        priority=schedule.priority,
        options=schedule.options,
    )
