"""Periodic tasks under real ``runworkers`` processes on the test database.

Three workers race for every tick of a one-second schedule and each tick is
one record and one run; a worker whose clock says the cluster was down for
hours catches up by each schedule's policy.
"""

from __future__ import annotations

import json
import math
import re
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings

from django_workers.models import ScheduleRecord, TaskRecord
from django_workers.periodic.book import DatabaseBook
from django_workers.periodic.declarations import from_settings
from django_workers.periodic.policy import tick_key
from tests.helpers import CHILD_SETTINGS, WorkerProcesses, wait_until
from tests.integration.test_guarantees import FAKETIME_ENV, faketime_prefix
from tests.models import Execution

pytestmark = pytest.mark.integration

#: Ticks every worker raced for: enough that a double or a gap would show.
RACED_TICKS = 20


def child_env(schedules: dict) -> dict[str, str]:
    return {"WORKERS_TEST_SETTINGS": json.dumps({**CHILD_SETTINGS, "SCHEDULES": schedules})}


def instant(task_id: str, key: str) -> datetime:
    return datetime.fromisoformat(task_id.removeprefix(f"schedule:{key}:"))


def test_three_racing_workers_run_each_tick_of_a_one_second_schedule_once(
    worker_processes: WorkerProcesses,
) -> None:
    schedule = {"pulse": {"task": "tests.tasks.record_execution", "every": 1, "catch_up": "all"}}
    workers = [worker_processes.start("--concurrency", "2", env=child_env(schedule)) for _ in "abc"]
    worker_processes.wait_registered(3)
    raced_from = datetime.now(UTC) + timedelta(seconds=1)

    def raced_runs() -> int:
        done = Execution.objects.filter(task_id__startswith="schedule:pulse:")
        return sum(
            instant(t, "pulse") >= raced_from for t in done.values_list("task_id", flat=True)
        )

    wait_until(lambda: raced_runs() >= RACED_TICKS, timeout=RACED_TICKS + 30, interval=0.2)
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(20.0) == 0, worker.log()

    records = {r.id: r for r in TaskRecord.objects.filter(id__startswith="schedule:pulse:")}
    ticks = sorted(instant(task_id, "pulse") for task_id in records)
    runs = Counter(Execution.objects.values_list("task_id", flat=True))
    # Every second from the first tick to the last has its record: none missed...
    assert ticks == [ticks[0] + timedelta(seconds=n) for n in range(len(ticks))]
    # ... each ran once, on its first attempt (a stop may leave the newest unrun) ...
    assert {runs[t] for t in records if records[t].status == "COMPLETED"} == {1}
    assert all(runs[t] <= 1 and records[t].attempts <= 1 for t in records)
    assert sum(r.status == "COMPLETED" for r in records.values()) >= RACED_TICKS
    # ... and exactly one scheduler enqueued each tick.
    enqueued = Counter(
        task_id
        for worker in workers
        for task_id in re.findall(r"enqueued as task (schedule:pulse:\S+)", worker.log())
    )
    assert enqueued == Counter(records.keys())
    assert ScheduleRecord.objects.get().last_task_id == max(records)


def test_a_worker_back_after_hours_of_downtime_catches_up_by_each_policy(
    worker_processes: WorkerProcesses,
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("a worker on a server database takes the server's clock, not its own")
    # The worker's clock: 30 minutes past an hour, tomorrow.
    real = datetime.now(UTC)
    back_at = real.replace(minute=30, second=0, microsecond=0) + timedelta(days=1)
    prefix = faketime_prefix(f"+{math.ceil((back_at - real).total_seconds())}s")
    hour = back_at.replace(minute=0)
    schedules = {
        policy: {
            "task": "tests.tasks.noop",
            "cron": "0 * * * *",
            "catch_up": policy,
            "catch_up_window": 3 * 3600,
        }
        for policy in ("latest", "all", "none")
    }
    # The cluster last ran at hour - 3 h + 10 s, and enqueued that hour's tick.
    book, last = DatabaseBook("default"), hour - timedelta(hours=3)
    with override_settings(DJANGO_WORKERS={"SCHEDULES": schedules}):
        declared, _problems = from_settings()
    book.sync(declared.values(), last - timedelta(hours=1))
    for policy in schedules:
        assert book.advance(policy, None, last, tick_key(policy, last))

    worker = worker_processes.start(prefix=prefix, env={**FAKETIME_ENV, **child_env(schedules)})
    hours = [hour - timedelta(hours=n) for n in (2, 1, 0)]
    expected = {tick_key("all", h) for h in hours} | {tick_key("latest", hour)}
    found = lambda: set(TaskRecord.objects.values_list("id", flat=True))  # noqa: E731
    try:
        wait_until(lambda: found() >= expected, timeout=30.0, interval=0.1)
    except AssertionError:
        raise AssertionError(f"enqueued {sorted(found())}; log:\n{worker.log()}") from None
    # The pass that enqueued them also decided "none", in the same loop over the schedules.
    assert found() == expected
    rows = {r.key: r.last_tick for r in ScheduleRecord.objects.all()}
    assert rows == {"all": hour, "latest": hour, "none": last}
    # Each decision is logged as the pass goes, after its rows are written: "none" is
    # decided last, so its line may come a moment after the rows above are visible.
    for line in (
        "Schedule none: 3 missed tick(s) not enqueued",
        "Schedule latest: 2 missed tick(s) not enqueued",
    ):
        try:
            # mypy infers no lambda with a default argument.
            wait_until(
                lambda line=line: line in worker.log(),  # type: ignore[misc]
                timeout=10.0,
                interval=0.05,
            )
        except AssertionError:
            raise AssertionError(f"no {line!r} in the log:\n{worker.log()}") from None
