"""The scheduler pass on each store: one record per tick however many schedulers race, owners,
pausing, catch-up after the clock moved, failures that retry, and a runtime that runs it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import override_settings

from django_workers import (
    Owner,
    System,
    TaskNotFound,
    TaskStatus,
    get_all_tasks,
    get_task_status,
    set_queue_authorizer,
)
from django_workers import clock as workers_clock
from django_workers.periodic.book import book_for
from django_workers.periodic.policy import tick_key
from django_workers.runtime.scheduler import RETRY_AFTER, Scheduler
from django_workers.stores import WorkerStore
from tests.helpers import end_record, start_runtime, wait_until

T0 = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def schedules(**entries: dict) -> override_settings:
    """DJANGO_WORKERS with these SCHEDULES (each entry's task defaults to tests.tasks.noop)."""
    return override_settings(
        DJANGO_WORKERS={
            "SCHEDULES": {key: {"task": "tests.tasks.noop", **e} for key, e in entries.items()}
        }
    )


def tick_ids(store: WorkerStore) -> list[str]:
    return sorted(info.id for info in get_all_tasks(System(), limit=1000, store=store))


@pytest.fixture
def clock() -> Iterator[None]:
    """Let the test move this process's clock (time-machine); the stamps start afresh after."""
    saved = workers_clock._last
    workers_clock._last = None
    yield
    workers_clock._last = saved


# -- one record per tick --------------------------------------------------------------------


def test_a_tick_fires_once_however_many_schedulers_race_for_it(store: WorkerStore) -> None:
    with schedules(minutely={"cron": "* * * * *"}):
        racers = [Scheduler(store) for _ in range(3)]
        assert racers[0].run_pass(T0 - 30 * SECOND) == []  # creates the row: ticks after now
        fired = [s.run_pass(T0 + SECOND) for s in racers]
    expected = tick_key("minutely", T0)
    assert fired == [[expected], [], []]
    assert tick_ids(store) == [expected]
    info = get_task_status(expected, System(), store=store)
    assert (info.status, info.task_path, info.owner) == ("PENDING", "tests.tasks.noop", None)
    assert book_for(store).read()["minutely"].last_tick == T0


def test_a_late_scheduler_does_not_run_a_finished_tick_again(store: WorkerStore) -> None:
    with schedules(minutely={"cron": "* * * * *"}):
        first, late = Scheduler(store), Scheduler(store)
        first.run_pass(T0 - 30 * SECOND)
        late.run_pass(T0 - 30 * SECOND)  # read the row before the tick
        [task_id] = first.run_pass(T0 + SECOND)
        ended = end_record(store, task_id)
        assert late.run_pass(T0 + 2 * SECOND) == []
    # A second submit of the same id would have replaced the finished run.
    assert get_task_status(task_id, System(), store=store).run_id == ended.run_id


def test_a_schedule_with_an_owner_makes_tasks_only_that_owner_sees(store: WorkerStore) -> None:
    with schedules(mine={"every": 60, "owner": "ann", "args": [], "queue": "reports"}):
        scheduler = Scheduler(store)
        scheduler.run_pass(T0 - SECOND)
        [task_id] = scheduler.run_pass(T0 + SECOND)
    assert task_id == f"ann::{tick_key('mine', T0)}"
    assert get_task_status(task_id, Owner("ann"), store=store).queue == "reports"
    assert [i.id for i in get_all_tasks(Owner("ann"), store=store)] == [task_id]
    with pytest.raises(TaskNotFound):
        get_task_status(task_id, Owner("bob"), store=store)


# -- turning schedules off and on -----------------------------------------------------------


def test_a_disabled_schedule_fires_nothing(store: WorkerStore) -> None:
    with schedules(off={"every": 1, "enabled": False}):
        scheduler = Scheduler(store)
        for n in range(5):
            assert scheduler.run_pass(T0 + n * SECOND) == []
    assert tick_ids(store) == []
    assert book_for(store).read()["off"].enabled is False


def test_a_paused_schedule_fires_nothing_and_resumes_without_catching_up(
    store: WorkerStore,
) -> None:
    book = book_for(store)
    with schedules(minutely={"cron": "* * * * *", "catch_up": "all"}):
        scheduler = Scheduler(store)
        scheduler.run_pass(T0 - 30 * SECOND)
        assert book.set_paused(["minutely"], True, T0) == 1
        for minute in range(3):
            assert scheduler.run_pass(T0 + timedelta(minutes=minute, seconds=1)) == []
        resumed = T0 + timedelta(minutes=2, seconds=30)
        assert book.set_paused(["minutely"], False, resumed) == 1
        assert scheduler.run_pass(resumed + SECOND) == []  # 12:00, 12:01, 12:02 stay unrun
        assert scheduler.run_pass(T0 + timedelta(minutes=3, seconds=1)) == [
            tick_key("minutely", T0 + timedelta(minutes=3))
        ]


def test_a_changed_declaration_takes_effect_on_the_next_pass(store: WorkerStore) -> None:
    scheduler = Scheduler(store)
    with schedules(rates={"cron": "0 * * * *"}):
        scheduler.run_pass(T0 - SECOND)
        assert scheduler.run_pass(T0 + timedelta(minutes=5)) == [tick_key("rates", T0)]
    with schedules(rates={"cron": "*/10 * * * *", "timezone": "Europe/Paris"}):
        fired = scheduler.run_pass(T0 + timedelta(minutes=10, seconds=1))
        row = book_for(store).read()["rates"]
    assert fired == [tick_key("rates", T0 + timedelta(minutes=10))]
    assert (row.cron, row.time_zone) == ("*/10 * * * *", "Europe/Paris")
    with schedules(rates={"cron": "*/10 * * * *", "enabled": False}):
        assert scheduler.run_pass(T0 + timedelta(minutes=20, seconds=1)) == []


# -- the clock moved: downtime and the catch-up policies ------------------------------------


@pytest.mark.parametrize(
    ("policy", "hours"),
    [("latest", [15]), ("all", [13, 14, 15]), ("none", [])],
)
@pytest.mark.usefixtures("clock")
def test_after_the_cluster_was_down_each_policy_enqueues_its_ticks(
    store: WorkerStore, policy: str, hours: list[int]
) -> None:
    window = 4 * 3600
    with schedules(hourly={"cron": "0 * * * *", "catch_up": policy, "catch_up_window": window}):
        with time_machine.travel(T0 + 10 * SECOND, tick=False):
            Scheduler(store).run_pass()  # the cluster runs at 12:00:10 and sees the 12:00 tick
        # ... then nothing runs until 15:30, when a worker starts again.
        with time_machine.travel(T0 + timedelta(hours=3, minutes=30), tick=False):
            fired = Scheduler(store).run_pass()
    assert fired == [tick_key("hourly", T0.replace(hour=h)) for h in hours]
    last = book_for(store).read()["hourly"].last_tick
    assert last == (T0.replace(hour=hours[-1]) if hours else None)


@pytest.mark.usefixtures("clock")
def test_ticks_older_than_the_window_are_never_enqueued_late(store: WorkerStore) -> None:
    with schedules(nightly={"cron": "0 3 * * *", "catch_up": "all"}):  # window: 1 hour
        with time_machine.travel(T0.replace(hour=2), tick=False):
            Scheduler(store).run_pass()
        with time_machine.travel(T0.replace(hour=9), tick=False):
            assert Scheduler(store).run_pass() == []
    assert tick_ids(store) == []


# -- a pass that fails tries again ----------------------------------------------------------


def test_a_refused_tick_is_logged_not_recorded_and_tried_again(
    store: WorkerStore, caplog: pytest.LogCaptureFixture
) -> None:
    set_queue_authorizer(store, lambda queue, user_id: False)
    with schedules(mine={"cron": "* * * * *", "owner": "ann"}):
        scheduler = Scheduler(store)
        scheduler.run_pass(T0 - SECOND)
        with caplog.at_level(logging.ERROR, "django_workers.runtime.scheduler"):
            assert scheduler.run_pass(T0 + SECOND) == []
        assert "may not submit to queue 'default'" in caplog.text
        assert book_for(store).read()["mine"].last_tick is None
        set_queue_authorizer(store, None)
        assert scheduler.run_pass(T0 + 2 * SECOND) == []  # waits RETRY_AFTER
        assert scheduler.run_pass(T0 + SECOND + RETRY_AFTER) == [f"ann::{tick_key('mine', T0)}"]


def test_a_pass_with_nothing_declared_costs_no_query(
    django_assert_num_queries: object, db: None
) -> None:
    from django_workers.stores.database import DatabaseWorkerStore

    scheduler = Scheduler(DatabaseWorkerStore())
    with django_assert_num_queries(0):  # type: ignore[operator]
        assert scheduler.run_pass() == []


def test_a_pass_between_ticks_costs_no_query(django_assert_num_queries: object, db: None) -> None:
    from django_workers.stores.database import DatabaseWorkerStore

    with schedules(minutely={"cron": "* * * * *"}):
        scheduler = Scheduler(DatabaseWorkerStore())
        scheduler.run_pass(T0 + SECOND)
        with django_assert_num_queries(0):  # type: ignore[operator]
            for n in range(2, 60):
                assert scheduler.run_pass(T0 + n * SECOND) == []
        assert scheduler.run_pass(T0 + 61 * SECOND) == [tick_key("minutely", T0 + 60 * SECOND)]


# -- a runtime runs the pass ----------------------------------------------------------------


def test_a_runtime_fires_each_tick_once_and_a_failing_task_does_not_pile_up(
    tx_store: WorkerStore,
) -> None:
    store = tx_store
    with schedules(
        failing={
            "task": "tests.tasks.fail",
            "every": 1,
            "catch_up": "all",
            "options": {"retries": 1, "retry_backoff": 0},
        },
        off={"every": 1, "enabled": False},
    ):
        runtime = start_runtime(store)
        try:
            wait_until(lambda: len(tick_ids(store)) >= 3, timeout=10.0)
        finally:
            runtime.stop()
    infos = get_all_tasks(System(), limit=1000, store=store)
    ticks = sorted(datetime.fromisoformat(i.key.split(":", 2)[2]) for i in infos)
    assert all(i.key.startswith("schedule:failing:") for i in infos)
    # One record per second, none skipped or repeated; each failed after its one retry.
    assert ticks == [ticks[0] + n * SECOND for n in range(len(ticks))]
    # The last tick may have been running when the stop came: a drain does not retry.
    last = max(infos, key=lambda i: i.key)
    ended = [i for i in infos if i.status == TaskStatus.FAILED and i.id != last.id]
    assert ended
    assert all(i.attempts == 2 for i in ended)
    assert all(i.attempts <= 2 for i in infos)
