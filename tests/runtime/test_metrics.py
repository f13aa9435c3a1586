"""Prometheus metrics: the view's database figures, its gate, the run counters, the setting."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client, override_settings
from django.urls import reverse
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from django_workers import System, TaskStatus, cancel_task, clock, metrics, submit_task
from django_workers.checks import check_workers_settings
from django_workers.models import WorkerProcess
from django_workers.stores import default_store
from django_workers.stores.memory import InMemoryWorkerStore
from tests.helpers import ROOT, end_record, make_user, start_runtime, wait_for_status, wait_until

URL = reverse("django_workers:metrics")
TOKEN = "s3cret-metrics-token-0123456789"


def scrape(client: Client, **headers: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the view's answer: by metric name, then by its sorted labels."""
    response = client.get(URL, headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(key: str, queue: str) -> str:
    return submit_task(key, "tests.tasks.add", System(), args=[1, 2], scope="global", queue=queue)


@pytest.mark.django_db
@override_settings(DJANGO_WORKERS={"QUEUES": {"reports": {"concurrency": 1}}})
def test_the_view_serves_the_figures_of_workers_status() -> None:
    store = default_store()
    now = clock.now()
    WorkerProcess.objects.create(
        id="w1", host="alpha", pid=1, queues=["reports"], concurrency=2, heartbeat_at=now
    )
    WorkerProcess.objects.create(id="w0", host="beta", pid=2, heartbeat_at=now - timedelta(hours=1))
    held = submit("held", "reports")
    store.claim("w1", ["reports"], 1, clock.now())
    cancel_task(held, System())  # its function still runs: the slot stays held
    submit("r1", "reports")
    submit("r2", "reports")
    end_record(store, submit("done", "emails"))
    end_record(store, submit("broke", "emails"), TaskStatus.FAILED)

    found = scrape(client_of(make_user("root", su=True)))

    reports, emails = (("queue", "reports"),), (("queue", "emails"),)
    assert found["django_workers_queue_pending"] == {reports: 2, emails: 0}
    assert found["django_workers_queue_held_slots"][reports] == 1
    assert found["django_workers_queue_retrying"][reports] == 0
    assert found["django_workers_queue_running"][reports] == 0
    assert found["django_workers_queue_oldest_pending_age_seconds"][reports] >= 0
    assert found["django_workers_queue_limit"] == {reports: 1}
    assert found["django_workers_queue_live_workers"] == {reports: 1, emails: 0}
    ended = found["django_workers_queue_ended_recently"]
    assert ended[(("queue", "emails"), ("status", "COMPLETED"), ("window", "5m"))] == 1
    assert ended[(("queue", "emails"), ("status", "FAILED"), ("window", "1h"))] == 1
    assert found["django_workers_workers"] == {(("state", "live"),): 1, (("state", "stale"),): 1}
    assert found["django_workers_held_slots"] == {(): 1}


@pytest.mark.django_db
@override_settings(DJANGO_WORKERS={"METRICS_TOKEN": TOKEN})
def test_the_view_opens_to_its_token_and_to_staff_with_the_view_permission() -> None:
    assert Client().get(URL).status_code == 403
    assert Client().get(URL, headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert Client().get(URL, headers={"Authorization": f"Basic {TOKEN}"}).status_code == 403
    scrape(Client(), Authorization=f"Bearer {TOKEN}")
    staff = make_user("sam")
    assert client_of(staff).get(URL).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_workerprocess"))
    scrape(client_of(staff))
    assert client_of(staff).post(URL).status_code == 405


@pytest.mark.django_db
def test_without_a_token_setting_no_bearer_opens_the_view() -> None:
    assert Client().get(URL, headers={"Authorization": "Bearer "}).status_code == 403
    assert Client().get(URL, headers={"Authorization": "Bearer None"}).status_code == 403


@pytest.mark.django_db
def test_without_prometheus_client_the_view_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "prometheus_client", None)
    response = client_of(make_user("root", su=True)).get(URL)
    assert response.status_code == 501
    assert 'pip install "django-workers-db[metrics]"' in response.content.decode()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def counting() -> Iterator[None]:
    """This process counts its runs, as one serving ``runworkers --metrics-port`` does."""
    assert metrics.connect()
    yield
    metrics.disconnect()


@pytest.mark.usefixtures("counting")
def test_runs_are_counted_by_queue_and_status_with_their_durations() -> None:
    store = InMemoryWorkerStore()
    queue = "metrics-counted"
    before = {
        "started": sample("django_workers_runs_started_total", queue=queue),
        "done": sample("django_workers_runs_ended_total", queue=queue, status="COMPLETED"),
        "failed": sample("django_workers_runs_ended_total", queue=queue, status="FAILED"),
        "timed": sample("django_workers_run_duration_seconds_count", queue=queue, status="FAILED"),
    }
    ok = submit_task(
        "ok", "tests.tasks.add", System(), args=[1, 2], scope="global", queue=queue, store=store
    )
    bad = submit_task("bad", "tests.tasks.fail", System(), scope="global", queue=queue, store=store)
    served = start_runtime(store)
    try:
        wait_for_status(store, ok, TaskStatus.COMPLETED)
        wait_for_status(store, bad, TaskStatus.FAILED)
        # run_finished is sent by the reporting thread once the end is written.
        wait_until(
            lambda: (
                sample("django_workers_runs_ended_total", queue=queue, status="FAILED")
                == before["failed"] + 1
            )
        )
    finally:
        served.stop()
    assert sample("django_workers_runs_started_total", queue=queue) == before["started"] + 2
    assert (
        sample("django_workers_runs_ended_total", queue=queue, status="COMPLETED")
        == before["done"] + 1
    )
    assert (
        sample("django_workers_run_duration_seconds_count", queue=queue, status="FAILED")
        == before["timed"] + 1
    )


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        (12345678901234567, "must be a string or None"),
        ("short", "at least 16 characters"),
        ("a token with spaces inside", "without spaces"),
        ("tab\tinside-the-token-xx", "printable"),
    ],
)
def test_a_bad_metrics_token_is_an_error_of_the_checks(token: Any, problem: str) -> None:
    with override_settings(DJANGO_WORKERS={"METRICS_TOKEN": token}):
        [error] = [m for m in check_workers_settings() if m.id == "django_workers.E021"]
    assert problem in error.msg
    assert error.hint is not None
    assert "secrets.token_urlsafe" in error.hint


def test_a_long_metrics_token_passes_the_checks() -> None:
    with override_settings(DJANGO_WORKERS={"METRICS_TOKEN": TOKEN}):
        assert check_workers_settings() == []


@pytest.mark.django_db
@override_settings(DJANGO_WORKERS={"QUEUES": {"default": {"concurrency": 1}}})
def test_the_dashboard_and_the_docs_name_only_metrics_that_exist() -> None:
    submit("one", "default")
    served = set(scrape(client_of(make_user("root", su=True))))
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
    for family in REGISTRY.collect():
        if family.name.startswith("django_workers_"):
            served |= {family.name + end for end in suffixes.get(family.type, [""])}
    texts = [
        json.dumps(json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())),
        (ROOT / "docs" / "operating.md").read_text(),
    ]
    named = {name for text in texts for name in re.findall(r"django_workers_[a-z_]+", text)}
    # The docs' tables name a histogram by its family; queries read its series.
    assert named - served <= {"django_workers_run_duration_seconds"}
    assert "django_workers_run_duration_seconds_bucket" in named
