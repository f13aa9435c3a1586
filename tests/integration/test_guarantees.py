"""Guarantees of the worker runtime past the happy path, seen from outside.

Real ``runworkers`` subprocesses on the test database, as in
``test_integration``: a sequential queue runs one function at a time even
past a cancel, a worker whose clock is off neither steals nor loses live runs,
and a worker whose output nobody reads still records every end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from django.db import connection

from django_workers import (
    System,
    TaskOptions,
    TaskStatus,
    TaskSubmission,
    cancel_task,
    submit_task,
    submit_tasks,
)
from django_workers.info import LIVE_STATUSES
from django_workers.models import TaskRecord
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks
from tests.helpers import (
    ROOT,
    WorkerProcesses,
    WorkerSubprocess,
    child_env,
    wait_for_status,
    wait_until,
)
from tests.models import Execution

pytestmark = pytest.mark.integration

COMPLETED, FAILED, CANCELLED = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED
RUNNING = TaskStatus.RUNNING
ENDED = (COMPLETED, FAILED, CANCELLED)


@pytest.fixture
def store(transactional_db: None) -> DatabaseWorkerStore:
    return DatabaseWorkerStore()


# -- a sequential queue counts running functions, not records ---------------------------------


def test_a_sequential_queue_starts_no_task_until_a_cancelled_function_returned(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses
) -> None:
    # Two processes serve the queue, so the next task could start on the other one.
    worker_processes.start("--queues", "seq")
    worker_processes.start("--queues", "seq")
    worker_processes.wait_registered(2)
    # record_execution never looks at its token: cancelled, it runs on for its 4 s.
    first = submit_task(
        "stubborn", tasks.record_execution, System(), args=[4], queue="seq", scope="global"
    )
    wait_until(Execution.objects.filter(task_id=first).exists, timeout=20.0)
    second = submit_task("next", tasks.record_execution, System(), queue="seq", scope="global")
    assert cancel_task(first, System()).status == CANCELLED  # the record ends at once
    wait_for_status(store, second, COMPLETED, timeout=20.0)
    returned = wait_until(
        Execution.objects.filter(task_id=first, finished_at__isnull=False).first, timeout=15.0
    )
    started = Execution.objects.get(task_id=second).started_at
    assert returned.finished_at is not None  # the filter asked for it
    assert started >= returned.finished_at, (
        f"the next task started {(returned.finished_at - started).total_seconds():.2f} s "
        "before the cancelled function returned"
    )
    assert store.get_task_info(first).status == CANCELLED  # type: ignore[union-attr]


# -- one clock --------------------------------------------------------------------------------


#: What a worker under faketime must see: its wall clock off, its timed waits on time.
FAKETIME_PROBE = """
import threading, time
started = time.monotonic()
threading.Event().wait(0.2)
print(time.time(), time.monotonic() - started)
"""

#: A host whose wall clock is off still has a steady monotonic clock (and with a faked
#: one, libfaketime 0.9.10 hangs Python's timed lock waits).
FAKETIME_ENV = {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def faketime_prefix(offset: str) -> list[str]:
    """The command prefix that runs a child ``offset`` off (``+120s``); skip if unavailable."""
    path = shutil.which("faketime")
    if path is None:
        pytest.skip("faketime is not installed (Debian package faketime)")
    probe = [path, "-f", offset, sys.executable, "-c", FAKETIME_PROBE]
    env = {**os.environ, **FAKETIME_ENV}
    try:
        out = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=20.0)
        wall, waited = map(float, out.stdout.split())
    except (subprocess.SubprocessError, ValueError) as e:
        pytest.skip(f"faketime cannot run Python here: {e}")
    shift, expected = wall - time.time(), float(offset.removesuffix("s"))
    if abs(shift - expected) > 30 or not 0.1 < waited < 5:
        pytest.skip(
            f"faketime {offset} does not fake Python's clock as needed here "
            f"(wall clock off by {shift:.0f} s, a 0.2 s wait took {waited:.2f} s)"
        )
    return [path, "-f", offset]


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    ("skew", "skewed_runs"),
    [("+120s", False), ("-120s", True)],
    ids=["ahead-joins-a-busy-worker", "behind-runs-beside-a-normal-worker"],
)
def test_a_worker_whose_clock_is_off_neither_steals_live_runs_nor_loses_its_own(
    store: DatabaseWorkerStore, worker_processes: WorkerProcesses, skew: str, skewed_runs: bool
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("clock skew between hosts is tested on PostgreSQL")
    prefix = faketime_prefix(skew)

    def start(skewed: bool) -> WorkerSubprocess:
        if skewed:
            return worker_processes.start("--concurrency", "4", prefix=prefix, env=FAKETIME_ENV)
        return worker_processes.start("--concurrency", "4")

    start(skewed_runs)
    worker_processes.wait_registered(1)
    # A retry left, so a run wrongly declared lost is started again where it shows.
    long_runs = [
        TaskSubmission(
            key=f"long-{i}",
            task=tasks.record_execution,
            args=[8],
            options=TaskOptions(retries=1),
            scope="global",
        )
        for i in range(4)
    ]
    ids = submit_tasks(long_runs, System())
    runner = {wait_for_status(store, i, RUNNING, timeout=20.0).worker_id for i in ids}
    assert len(runner) == 1
    start(not skewed_runs)
    worker_processes.wait_registered(2)
    infos = [wait_for_status(store, i, *ENDED, timeout=30.0) for i in ids]
    starts = Counter(Execution.objects.values_list("task_id", flat=True))
    # (status, attempts, error, times its function started) of each task.
    outcomes = {
        info.id: (info.status, info.attempts, info.error and info.error.type, starts[info.id])
        for info in infos
    }
    assert outcomes == dict.fromkeys(ids, (COMPLETED, 1, None, 1))
    assert {info.worker_id for info in infos} == runner


# -- ends are written whatever happens to the output -------------------------------------------


@contextlib.contextmanager
def unread_worker(*args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``runworkers`` whose stdout and stderr are pipes nobody reads; killed on the way out."""
    command = [sys.executable, "-m", "django", "runworkers", *args, "--settings=tests.settings"]
    popen = subprocess.Popen(
        command,
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield popen
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(10.0)
        for pipe in (popen.stdout, popen.stderr):
            if pipe is not None:
                pipe.close()


def wait_drained(total: int, timeout: float, stall: float) -> None:
    """Wait until no record is live; fail at ``timeout``, or once none ended for ``stall`` s."""
    deadline = time.monotonic() + timeout
    live = TaskRecord.objects.filter(status__in=LIVE_STATUSES)
    last, moved = -1, time.monotonic()
    while (left := live.count()) > 0:
        now = time.monotonic()
        if left != last:
            last, moved = left, now
        if now - moved > stall or now > deadline:
            statuses = Counter(TaskRecord.objects.values_list("status", flat=True))
            raise AssertionError(
                f"{left} of {total} tasks still live after {timeout - (deadline - now):.0f} s, "
                f"none ended in the last {now - moved:.0f} s: {dict(statuses)}"
            )
        time.sleep(0.2)


def test_a_worker_whose_output_nobody_reads_still_records_every_end(
    transactional_db: None,
) -> None:
    total = 5000
    # Verbosity 1 logs every end: a few hundred lines fill a 64 KiB pipe. Sixteen threads
    # claim in batches big enough to drain 5,000 no-ops well within the deadline.
    with unread_worker("--concurrency", "16", "--verbosity", "1"):
        noops = [
            TaskSubmission(key=f"noop-{i:04}", task=tasks.noop, scope="global")
            for i in range(total)
        ]
        submit_tasks(noops, System())
        wait_drained(total, timeout=120.0, stall=15.0)
    assert TaskRecord.objects.filter(status=COMPLETED).count() == total
