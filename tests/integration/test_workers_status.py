"""``manage.py workers status`` sees a real ``runworkers`` process and the queues it serves."""

from __future__ import annotations

import json
import socket
from io import StringIO

import pytest
from django.core.management import call_command

from django_workers import System, submit_task
from tests.helpers import WorkerProcesses

pytestmark = pytest.mark.integration


def test_status_shows_a_live_runworkers_and_flags_the_queue_it_does_not_serve(
    worker_processes: WorkerProcesses,
) -> None:
    worker = worker_processes.start("--queues", "default", "--concurrency", "3")
    worker_processes.wait_registered(1)
    submit_task("stuck", "tests.tasks.add", System(), args=[1, 2], scope="global", queue="nobody")

    out = StringIO()
    call_command("workers", "status", "--json", stdout=out)
    report = json.loads(out.getvalue())

    [seen] = report["workers"]
    assert (seen["pid"], seen["queues"], seen["concurrency"]) == (worker.pid, ["default"], 3)
    assert seen["host"] == socket.gethostname()[:200]
    assert seen["stale"] is False
    queues = {q["queue"]: q for q in report["queues"]}
    assert queues["nobody"]["pending"] == 1
    assert queues["nobody"]["served"] is False
    assert queues["default"]["served"] is True
