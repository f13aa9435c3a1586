"""Prometheus metrics: the queues and workers as the database tells them, and this process's runs.

Needs ``prometheus_client`` (``pip install "django-workers-db[metrics]"``);
without it nothing here is connected and the metrics view says how to add it.

Two kinds of figures, served in two places:

- **From the database**, the same in whichever process asks: each queue's
  pending, retrying, running and held counts, its oldest pending task's age,
  its recent ends, its limit and its live workers; the live and stale workers.
  They are ``operations.status()``, the figures of ``manage.py workers status``,
  read at each scrape by ``DatabaseCollector``; the view ``metrics`` of
  ``django_workers.urls`` serves them.
- **Of this process's runs**: runs started, runs ended by status, and their
  durations, counted by receivers of the runtime's ``run_started`` and
  ``run_finished`` signals, connected by ``serve`` only. They live in the
  worker process that ran them and are served by ``runworkers --metrics-port``,
  in prometheus_client's default registry with the process's own metrics.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from django_workers import operations
from django_workers.conf import workers_settings
from django_workers.info import TaskInfo
from django_workers.stores import default_store

try:
    import prometheus_client
    from prometheus_client.core import GaugeMetricFamily
except ImportError:  # the optional extra is not installed
    prometheus_client = None  # type: ignore[assignment]  # None stands for the missing module

#: What to tell a site that asks for metrics without the extra installed.
INSTALL_HINT = (
    'Metrics need prometheus_client: pip install "django-workers-db[metrics]", then restart.'
)

#: Seconds: from quick tasks to hour-long ones.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

#: The view permission that opens the metrics to a signed-in user, as the queues page.
VIEW_PERMISSION = "django_workers.view_workerprocess"


def available() -> bool:
    """Whether prometheus_client is importable here."""
    return prometheus_client is not None


# -- this process's runs ---------------------------------------------------------------------

if prometheus_client is not None:
    RUNS_STARTED = prometheus_client.Counter(
        "django_workers_runs_started",
        "Runs this process started, by queue.",
        ["queue"],
    )
    RUNS_ENDED = prometheus_client.Counter(
        "django_workers_runs_ended",
        "Records that ended through this process (a run, a cancel of its run, a zombie "
        "sweep), by queue and status.",
        ["queue", "status"],
    )
    RUN_DURATION = prometheus_client.Histogram(
        "django_workers_run_duration_seconds",
        "From a run's start to its record's end, by queue and status.",
        ["queue", "status"],
        buckets=DURATION_BUCKETS,
    )


def count_started(sender: Any, info: TaskInfo, **kwargs: Any) -> None:
    """``run_started`` receiver: one more run of the task's queue."""
    RUNS_STARTED.labels(queue=info.queue).inc()


def count_finished(sender: Any, info: TaskInfo, **kwargs: Any) -> None:
    """``run_finished`` receiver: one more end of its status, and how long the run took."""
    status = str(info.status)
    RUNS_ENDED.labels(queue=info.queue, status=status).inc()
    if info.started_at is not None and info.finished_at is not None:
        seconds = max(0.0, (info.finished_at - info.started_at).total_seconds())
        RUN_DURATION.labels(queue=info.queue, status=status).observe(seconds)


def connect() -> bool:
    """Connect the run counters to the runtime's signals; False without prometheus_client."""
    if not available():
        return False
    from django_workers.signals import run_finished, run_started

    run_started.connect(count_started, dispatch_uid="workers-metrics-started")
    run_finished.connect(count_finished, dispatch_uid="workers-metrics-finished")
    return True


def disconnect() -> None:
    """Stop counting this process's runs."""
    from django_workers.signals import run_finished, run_started

    run_started.disconnect(dispatch_uid="workers-metrics-started")
    run_finished.disconnect(dispatch_uid="workers-metrics-finished")


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Count this process's runs and serve them on ``port`` (prometheus_client's own server).

    Counting costs an ended snapshot per task, so only a process that serves the
    counters connects them.
    """
    if prometheus_client is None:
        raise RuntimeError(INSTALL_HINT)
    connect()
    prometheus_client.start_http_server(port, addr=addr)


# -- the database's figures ------------------------------------------------------------------


class DatabaseCollector:
    """The queues and workers of ``operations.status()``, read from the store at each scrape."""

    def __init__(self, store: Any = None) -> None:
        self.store = store

    def describe(self) -> list[Any]:
        # Described as nothing, so registering it reads nothing from the database.
        return []

    def collect(self) -> Iterator[Any]:
        report = operations.status(self.store or default_store())
        by_queue = {
            "pending": "Pending tasks (retrying ones included).",
            "retrying": "Pending tasks that ran before: a retry, or a recovered run.",
            "running": "Running tasks.",
            "held_slots": "Slots held by cancelled or timed-out runs whose function still runs.",
        }
        for name, text in by_queue.items():
            family = GaugeMetricFamily(f"django_workers_queue_{name}", text, labels=["queue"])
            for q in report.queues:
                family.add_metric([q.queue], getattr(q, name))
            yield family
        oldest = GaugeMetricFamily(
            "django_workers_queue_oldest_pending_age_seconds",
            "Age of the queue's oldest pending task (0 when none waits).",
            labels=["queue"],
        )
        ended = GaugeMetricFamily(
            "django_workers_queue_ended_recently",
            "Tasks that ended COMPLETED or FAILED within the window (5m, 1h), by database time.",
            labels=["queue", "status", "window"],
        )
        limit = GaugeMetricFamily(
            "django_workers_queue_limit",
            "The queue's concurrency limit across all workers (only queues that have one).",
            labels=["queue"],
        )
        serving = GaugeMetricFamily(
            "django_workers_queue_live_workers",
            "Live workers that take the queue's tasks.",
            labels=["queue"],
        )
        for q in report.queues:
            oldest.add_metric([q.queue], q.oldest_pending_age or 0.0)
            for status, window, value in (
                ("COMPLETED", "5m", q.completed_5m),
                ("COMPLETED", "1h", q.completed_1h),
                ("FAILED", "5m", q.failed_5m),
                ("FAILED", "1h", q.failed_1h),
            ):
                ended.add_metric([q.queue, status, window], value)
            if q.limit is not None:
                limit.add_metric([q.queue], q.limit)
            serving.add_metric([q.queue], len(q.workers))
        yield from (oldest, ended, limit, serving)
        workers = GaugeMetricFamily(
            "django_workers_workers",
            "Registered worker processes: live, or stale (no heartbeat within LEASE_TIMEOUT).",
            labels=["state"],
        )
        stale = sum(w.stale for w in report.workers)
        workers.add_metric(["live"], len(report.workers) - stale)
        workers.add_metric(["stale"], stale)
        yield workers
        held = GaugeMetricFamily(
            "django_workers_held_slots",
            "Slots held by cancelled or timed-out runs whose function still runs, all workers.",
        )
        held.add_metric([], sum(w.worker.held_slots for w in report.workers))
        yield held


def database_exposition(store: Any = None) -> tuple[bytes, str]:
    """The database's figures in Prometheus's text format, and its content type."""
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(store))
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST


# -- the view --------------------------------------------------------------------------------


def bearer_matches(request: HttpRequest) -> bool:
    """Whether the request carries ``Authorization: Bearer <METRICS_TOKEN>``."""
    token = workers_settings.METRICS_TOKEN
    if not isinstance(token, str) or not token:
        return False
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def may_read(request: HttpRequest) -> bool:
    """Staff holding the worker processes' view permission, or the metrics token's bearer."""
    if bearer_matches(request):
        return True
    user = getattr(request, "user", None)  # None without Django's authentication middleware
    return bool(
        user is not None and user.is_active and user.is_staff and user.has_perm(VIEW_PERMISSION)
    )


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The database's figures for Prometheus; 403 for anyone else, 501 without the extra."""
    if not may_read(request):
        return HttpResponse(
            "Metrics are for staff with the 'Can view worker process' permission, or for "
            "Authorization: Bearer <DJANGO_WORKERS['METRICS_TOKEN']>.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    if not available():
        return HttpResponse(INSTALL_HINT + "\n", status=501, content_type="text/plain")
    body, content_type = database_exposition()
    return HttpResponse(body, content_type=content_type)
