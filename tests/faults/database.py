"""The test process's view of a private cluster's database: a Django alias, and drain waits.

The product's API takes ``store=DatabaseWorkerStore(ALIAS)``; the models read
``.using(ALIAS)``. The alias is added to ``connections`` for one test and
removed after it, so no other test ever sees it.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import dj_database_url
from django.db import DatabaseError, connections

from django_workers.engine.machine import WORKFLOW_ENDS
from django_workers.info import LIVE_STATUSES
from django_workers.models import TaskRecord, WorkflowRecord
from django_workers.stores.database import DatabaseWorkerStore
from tests.faults.cluster import TEST_APPLICATION, WORKER_APPLICATION, PrivateCluster

#: The alias of the private cluster's database in the test process.
ALIAS = "faults"


@dataclass
class FaultDatabase:
    """One database of the private cluster, as the test process and its workers reach it."""

    cluster: PrivateCluster
    name: str
    alias: str = ALIAS

    def store(self) -> DatabaseWorkerStore:
        return DatabaseWorkerStore(self.alias)

    def worker_url(self, port: int | None = None) -> str:
        """The workers' DATABASE_URL: straight to the server, or through ``port`` (a proxy)."""
        return self.cluster.url(self.name, port=port, application=WORKER_APPLICATION)

    def reconnect(self) -> None:
        """Drop the test process's connection (after an outage it is dead)."""
        with contextlib.suppress(DatabaseError):
            connections[self.alias].close()


def add_alias(alias: str, url: str) -> None:
    """Make ``alias`` a database of this process, as if DATABASES named it."""
    config = dj_database_url.parse(url, conn_max_age=0)
    config.setdefault("OPTIONS", {})["application_name"] = TEST_APPLICATION
    # Django fills in every default key (TEST, TIME_ZONE, ...) as it does at start-up.
    filled = connections.configure_settings({"default": {}, alias: config})[alias]
    connections.settings[alias] = filled


def remove_alias(alias: str) -> None:
    """Close this thread's connection of ``alias`` and forget the alias."""
    with contextlib.suppress(Exception):
        connections[alias].close()
    with contextlib.suppress(AttributeError):
        del connections[alias]
    connections.settings.pop(alias, None)


def live_counts(alias: str) -> tuple[int, int]:
    """Task records not ended, workflows not ended."""
    tasks = TaskRecord.objects.using(alias).filter(status__in=LIVE_STATUSES).count()
    flows = WorkflowRecord.objects.using(alias).exclude(state__in=list(WORKFLOW_ENDS)).count()
    return tasks, flows


def describe_live(alias: str, shown: int = 10) -> str:
    """The counts by status, and the first live records: their worker, start and executions."""
    from tests.models import Execution

    try:
        records = TaskRecord.objects.using(alias)
        statuses = dict(Counter(records.values_list("status", flat=True)))
        live = records.filter(status__in=LIVE_STATUSES).order_by("id")[:shown]
        lines = [
            f"  {r.id} {r.status} worker={r.worker_id} attempts={r.attempts} "
            f"started_at={r.started_at} executions="
            f"{Execution.objects.using(alias).filter(task_id=r.id).count()}"
            for r in live
        ]
    except DatabaseError as e:
        return f"(unreadable: {e})"
    return f"{statuses}; first live:\n" + "\n".join(lines)


def wait_drained(
    alias: str,
    *,
    timeout: float,
    stall: float = 30.0,
    broken: Callable[[], str | None] = lambda: None,
) -> float:
    """Wait until every record and workflow has ended; the seconds it took.

    Fails at ``timeout``, or as soon as nothing ended for ``stall`` seconds, with
    the counts by status, or as soon as ``broken()`` says why waiting is pointless
    (a worker exited, say). A database error (the server is coming back) is retried.
    """
    started = time.monotonic()
    deadline = started + timeout
    last, moved = (-1, -1), started
    while True:
        if (why := broken()) is not None:
            raise AssertionError(why)
        now = time.monotonic()
        try:
            left = live_counts(alias)
        except DatabaseError:
            connections[alias].close()
            left = last
        if left == (0, 0):
            return now - started
        if left != last:
            last, moved = left, now
        if now - moved > stall or now > deadline:
            raise AssertionError(
                f"{left[0]} tasks and {left[1]} workflows still live after {now - started:.0f} s, "
                f"none ended in the last {now - moved:.0f} s: {describe_live(alias)}"
            )
        time.sleep(0.2)
