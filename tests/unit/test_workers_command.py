"""``manage.py workers``: every subcommand (rerun-workflow too) on real records."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_workers import clock, lifecycle
from django_workers.api import cancel_task, get_task_status, submit_task
from django_workers.authority import Owner, Scope, System
from django_workers.info import TaskStatus
from django_workers.stores.base import WorkerRegistration
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.workflows import Workflow
from tests.helpers import end_record
from tests.tasks import noop

pytestmark = pytest.mark.django_db

ALICE, BOB = Owner("alice"), Owner("bob")


def workers(*args: str) -> str:
    out = StringIO()
    call_command("workers", *args, stdout=out)
    return out.getvalue()


def workers_json(*args: str) -> Any:
    return json.loads(workers(*args, "--json"))


def failing(*args: str) -> tuple[CommandError, str]:
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("workers", *args, stdout=out)
    return caught.value, out.getvalue()


def submit(key: str, authority: Any = ALICE, **kw: Any) -> str:
    scope: Scope = "global" if isinstance(authority, System) else "user"
    return submit_task(key, "tests.tasks.add", authority, args=[1, 2], scope=scope, **kw)


def register(
    store: DatabaseWorkerStore, worker_id: str, queues: tuple[str, ...], age: float
) -> None:
    beat = clock.now() - timedelta(seconds=age)
    store.register_worker(
        WorkerRegistration(
            id=worker_id,
            host="h1",
            pid=123,
            queues=queues,
            concurrency=4,
            started_at=beat,
            heartbeat_at=beat,
        )
    )


# -- status --


def test_status_shows_workers_queues_and_flags_a_queue_only_a_stale_worker_serves() -> None:
    store = DatabaseWorkerStore()
    register(store, "w-live", ("default",), age=1)
    register(store, "w-stale", ("emails",), age=3600)
    running = submit("r1")
    [claimed] = store.claim("w-live", ["default"], 1, clock.now())
    assert claimed.id == running
    held = submit("h1")
    store.claim("w-live", ["default"], 1, clock.now())
    cancel_task(held, System())  # its function still runs: the slot stays held
    submit("p1")
    submit("mail-1", queue="emails")

    report = workers_json("status")

    by_id = {w["id"]: w for w in report["workers"]}
    assert by_id["w-live"]["running"] == 1
    assert by_id["w-live"]["held_slots"] == 1
    assert by_id["w-live"]["stale"] is False
    assert by_id["w-stale"]["stale"] is True
    assert by_id["w-stale"]["heartbeat_age"] >= 3600
    queues = {q["queue"]: q for q in report["queues"]}
    assert (queues["default"]["pending"], queues["default"]["running"]) == (1, 1)
    assert queues["default"]["served"] is True
    assert queues["emails"]["pending"] == 1
    assert queues["emails"]["served"] is False
    assert queues["emails"]["oldest_pending_age"] >= 0
    text = workers("status")
    assert "STALE" in text
    [emails_line] = [line for line in text.splitlines() if line.startswith("emails")]
    assert "no live worker serves this queue" in emails_line


@override_settings(DJANGO_WORKERS={"QUEUES": {"emails": {"concurrency": 2}}})
def test_status_shows_each_queues_retries_held_slots_recent_ends_limit_and_workers() -> None:
    store = DatabaseWorkerStore()
    register(store, "w-all", (), age=1)
    register(store, "w-mail", ("emails",), age=1)
    register(store, "w-dead", ("emails",), age=3600)
    now = clock.now()
    for key, status, age in [
        ("ok-1", TaskStatus.COMPLETED, 60),
        ("ok-2", TaskStatus.COMPLETED, 1200),
        ("bad-1", TaskStatus.FAILED, 120),
        ("bad-2", TaskStatus.FAILED, 7200),
    ]:
        end_record(
            store, submit(key, queue="emails"), status, finished_at=now - timedelta(seconds=age)
        )
    held = submit("held", queue="emails")
    store.claim("w-mail", ["emails"], 1, clock.now())
    cancel_task(held, System())  # its function still runs: the slot stays held
    again = submit("again", queue="emails")
    [claimed] = store.claim("w-mail", ["emails"], 1, clock.now())
    requeue = lifecycle.TaskEnd(
        kind=lifecycle.EndKind.REQUEUE,
        task_id=again,
        run_id=claimed.run_id,
        worker_id="w-mail",
        queue="emails",
        status=TaskStatus.PENDING,
    )
    assert store.end_tasks([requeue]) == [True]

    [emails] = [q for q in workers_json("status")["queues"] if q["queue"] == "emails"]

    assert emails == {
        "queue": "emails",
        "pending": 1,
        "retrying": 1,
        "running": 0,
        "held_slots": 1,
        "oldest_pending_age": emails["oldest_pending_age"],
        "completed_5m": 1,
        "completed_1h": 2,
        "failed_5m": 1,
        "failed_1h": 1,
        "limit": 2,
        "workers": ["w-all", "w-mail"],
        "served": True,
    }
    assert get_task_status(again, System()).attempts == 1
    [line] = [row for row in workers("status").splitlines() if row.startswith("emails")]
    cells = line.split()
    # queue, pending, retrying, running, held, limit; the age ("1.2 s"); ends, workers.
    assert cells[:6] == ["emails", "1", "1", "0", "1", "2"]
    assert cells[8:] == ["1/2", "1/1", "2"]


def test_status_counts_in_a_fixed_number_of_queries(django_assert_max_num_queries: Any) -> None:
    store = DatabaseWorkerStore()
    for n in range(3):
        register(store, f"w{n}", (), age=0)
        submit(f"t{n}", queue=f"q{n}")
    # The migrations check (two reads), then workers, held slots by worker and by
    # queue, live counts, the last hour's ends and, on PostgreSQL and MySQL, the
    # database's clock: none of it grows with the tables.
    with django_assert_max_num_queries(8):
        workers("status")


def test_status_says_when_there_is_nothing() -> None:
    text = workers("status")
    assert "none registered" in text
    assert "no pending, running or recently ended tasks" in text


# -- list and show --


def test_list_is_newest_first_and_filters_by_status_queue_and_owner() -> None:
    first = submit("a")
    second = submit("b", queue="emails")
    bobs = submit("c", BOB, watchers=[ALICE])
    end_record(DatabaseWorkerStore(), first, TaskStatus.FAILED)

    assert [t["id"] for t in workers_json("list")] == [bobs, second, first]
    assert [t["id"] for t in workers_json("list", "--status", "failed")] == [first]
    assert [t["id"] for t in workers_json("list", "--queue", "emails")] == [second]
    # bob owns one; alice owns two and watches bob's.
    assert [t["id"] for t in workers_json("list", "--owner", "bob")] == [bobs]
    assert len(workers_json("list", "--owner", "alice")) == 3
    assert [t["id"] for t in workers_json("list", "--limit", "1")] == [bobs]
    header, *lines = workers("list").splitlines()
    assert header.split() == [
        "ID",
        "STATUS",
        "QUEUE",
        "PROGRESS",
        "ATTEMPTS",
        "CREATED",
        "FINISHED",
    ]
    assert lines[2].split()[:2] == [first, "FAILED"]


def test_list_refuses_a_bad_status_or_limit_saying_what_is_allowed() -> None:
    error, _ = failing("list", "--status", "DONE")
    assert "PENDING" in str(error)
    error, _ = failing("list", "--limit", "0")
    assert "1 to 1000" in str(error)


def test_show_prints_every_field_the_traceback_and_the_watchers() -> None:
    task_id = submit("boom", watchers=[BOB])
    failure = {
        "type": "ValueError",
        "message": "boom",
        "traceback": "Traceback (most recent)\nValueError: boom",
    }
    end_record(DatabaseWorkerStore(), task_id, TaskStatus.FAILED, error=failure)

    data = workers_json("show", task_id)
    assert data["status"] == "FAILED"
    assert data["watchers"] == ["alice", "bob"]
    assert data["error"]["traceback"].endswith("ValueError: boom")
    assert {"id", "key", "owner", "args", "options", "run_id", "created_at", "finished_at"} <= set(
        data
    )
    finished_at = get_task_status(task_id, System()).finished_at
    assert finished_at is not None
    assert data["finished_at"] == finished_at.isoformat()
    text = workers("show", task_id)
    assert "ValueError: boom" in text
    assert "Traceback (most recent)" in text
    assert "bob" in text


def test_show_lists_the_watchers_a_node_takes_from_its_shared_workflow() -> None:
    wf = Workflow("nightly", System(), watchers=[BOB])
    wf.add("only", noop)
    node = wf.submit().status().node("only").task_id
    assert workers_json("show", node)["watchers"] == ["bob"]


def test_show_of_an_unknown_id_is_an_error() -> None:
    error, _ = failing("show", "nobody::nothing")
    assert "No task 'nobody::nothing'" in str(error)


# -- cancel --


def test_cancel_answers_per_id_and_fails_if_any_was_not_cancelled() -> None:
    live = submit("live")
    done = submit("done")
    end_record(DatabaseWorkerStore(), done)

    error, out = failing("cancel", live, done, "alice::missing")

    assert error.returncode == 1
    assert out.splitlines() == [
        f"{live}: cancelled (CANCELLED)",
        f"{done}: already finished (COMPLETED)",
        "alice::missing: not found",
    ]
    assert get_task_status(live, System()).status == TaskStatus.CANCELLED


def test_cancel_exits_zero_when_all_were_cancelled() -> None:
    ids = [submit("x"), submit("y", System())]
    assert [r["outcome"] for r in workers_json("cancel", *ids)] == ["cancelled", "cancelled"]


# -- rerun-workflow --


def test_rerun_workflow_answers_per_id_and_fails_if_any_was_not_rerun() -> None:
    from django_workers.testing import run_tasks
    from django_workers.workflows import Workflow, get_workflow_status

    wf = Workflow("pipeline", ALICE)
    first = wf.add("first", "tests.tasks.add", args=[1, 1], queue="steps")
    wf.add("second", "tests.tasks.wf_fail", queue="steps").after(first)
    failed = wf.submit().id
    run_tasks(queues=["steps"])
    running = Workflow("live", ALICE)
    running.add("only", "tests.tasks.noop", queue="idle")
    live = running.submit().id

    error, out = failing("rerun-workflow", failed, live, "alice::missing")

    assert error.returncode == 1
    assert str(error) == "2 of 3 workflows not re-run."
    lines = out.splitlines()
    assert lines[0] == f"{failed}: re-run (run 2, 1 of 2 nodes run again)"
    assert lines[1].startswith(f"{live}: refused (Workflow {live!r} cannot be re-run: it is")
    assert lines[2] == "alice::missing: not found"
    assert get_workflow_status(failed, System()).state == "running"


# -- retry --


def test_retry_re_runs_a_failed_task_under_its_id_keeping_its_input_and_watchers() -> None:
    task_id = submit("again", watchers=[BOB], queue="emails", priority=5)
    before = end_record(DatabaseWorkerStore(), task_id, TaskStatus.FAILED)

    [result] = workers_json("retry", task_id)

    after = get_task_status(task_id, ALICE)
    assert result["outcome"] == "retried"
    assert after.status == TaskStatus.PENDING
    assert after.run_id != before.run_id
    assert (after.args, after.queue, after.priority, after.owner) == ([1, 2], "emails", 5, "alice")
    assert after.watchers == ("alice", "bob")


def test_retry_re_runs_a_cancelled_global_task_as_system() -> None:
    task_id = submit("site-wide", System())
    cancel_task(task_id, System())
    assert workers("retry", task_id).startswith(f"{task_id}: retried (was CANCELLED")
    after = get_task_status(task_id, System())
    assert after.status == TaskStatus.PENDING
    assert after.owner is None
    assert after.scope == "global"


def test_retry_refuses_live_and_completed_tasks_unless_completed_is_allowed() -> None:
    live = submit("live")
    done = submit("done")
    end_record(DatabaseWorkerStore(), done)

    error, out = failing("retry", live, done)

    assert error.returncode == 1
    assert "is PENDING, not FAILED or CANCELLED; it has not ended" in out
    assert "is COMPLETED" in out
    assert "pass --completed" in out
    assert get_task_status(done, System()).status == TaskStatus.COMPLETED
    assert workers_json("retry", "--completed", done)[0]["outcome"] == "retried"
    assert get_task_status(done, System()).status == TaskStatus.PENDING


@override_settings(TASKS={"default": {"BACKEND": "django_workers.backends.WorkersBackend"}})
def test_retry_keeps_a_django_tasks_record_readable_through_its_backend() -> None:
    from tests.tasks import django_add

    result = django_add.enqueue(1, 2)
    cancel_task(result.id, System())

    workers("retry", result.id)

    assert get_task_status(result.id, System()).backend == "default"
    assert django_add.get_result(result.id).status == "READY"


# -- purge --


def _finished(key: str, status: TaskStatus, age_days: float) -> str:
    task_id = submit(key)
    when = clock.now() - timedelta(days=age_days)
    end_record(DatabaseWorkerStore(), task_id, status, finished_at=when)
    return task_id


def test_purge_without_yes_only_counts_and_deletes_nothing() -> None:
    old = _finished("old", TaskStatus.COMPLETED, 10)

    out = workers("purge", "--older-than", "3600")

    assert "COMPLETED: would delete 1" in out
    assert "Dry run" in out
    assert get_task_status(old, System())


def test_purge_with_yes_deletes_by_status_and_age_in_batches() -> None:
    old = [_finished(f"old{n}", TaskStatus.FAILED, 2) for n in range(5)]
    recent = _finished("recent", TaskStatus.FAILED, 0)
    other = _finished("done", TaskStatus.COMPLETED, 2)

    with override_settings(DJANGO_WORKERS={"CLEANUP_BATCH": 2}):
        report = workers_json("purge", "--status", "FAILED", "--older-than", "86400", "--yes")

    assert report["deleted"] is True
    assert [(s["status"], s["count"]) for s in report["statuses"]] == [("FAILED", 5)]
    assert [t["id"] for t in workers_json("list")] == [other, recent]
    assert not set(old) & {t["id"] for t in workers_json("list")}


def test_purge_by_default_applies_each_statuses_retention_and_skips_kept_ones() -> None:
    eight_days = _finished("c", TaskStatus.COMPLETED, 8)
    kept = _finished("f", TaskStatus.FAILED, 8)

    retention = {"RETENTION": {"FAILED": None}}  # COMPLETED keeps its default of 7 days
    with override_settings(DJANGO_WORKERS=retention):
        report = workers_json("purge", "--yes")

    assert {s["status"]: s["count"] for s in report["statuses"]} == {"CANCELLED": 0, "COMPLETED": 1}
    remaining = {t["id"] for t in workers_json("list")}
    assert kept in remaining
    assert eight_days not in remaining


def test_purge_refuses_a_live_status() -> None:
    error, _ = failing("purge", "--status", "PENDING")
    assert "Only finished tasks can be purged" in str(error)


# -- the command itself --


def test_the_command_refuses_a_store_that_lives_in_another_process() -> None:
    with override_settings(
        DJANGO_WORKERS={"STORE": "django_workers.stores.memory.InMemoryWorkerStore"}
    ):
        error, _ = failing("status")
    assert "InMemoryWorkerStore" in str(error)
    assert "durable store" in str(error)


def test_the_help_says_it_acts_as_system() -> None:
    from django_workers.management.commands.workers import Command

    assert "Acts as System()" in Command().create_parser("manage.py", "workers").format_help()
