"""``runworkers --metrics-port``: each worker process serves its run counters over HTTP."""

from __future__ import annotations

import contextlib
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from django_workers import System, TaskStatus, submit_task
from django_workers.stores import default_store
from tests.helpers import WorkerProcesses, wait_for_status, wait_until

pytestmark = pytest.mark.integration


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive TCP ports nothing listens on now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count - 1 > 65535:
            continue
        try:
            with contextlib.ExitStack() as stack:
                for port in range(first, first + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise AssertionError("no free consecutive ports")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    """The samples served on ``port``, or None while nothing answers there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def ended(samples: dict, status: str) -> float:
    return samples.get(
        ("django_workers_runs_ended_total", (("queue", "default"), ("status", status))), 0.0
    )


def test_a_worker_serves_the_runs_it_started_and_ended(worker_processes: WorkerProcesses) -> None:
    port = free_ports(1)
    worker = worker_processes.start("--metrics-port", str(port))
    worker_processes.wait_registered(1)
    worker.wait_for_log(f"metrics:     Prometheus on port {port}")
    task_id = submit_task("sum", "tests.tasks.add", System(), args=[1, 2], scope="global")
    wait_for_status(default_store(), task_id, TaskStatus.COMPLETED, timeout=20)

    samples = wait_until(
        lambda: (found := scrape(port)) and ended(found, "COMPLETED") >= 1 and found,
        timeout=10,
        interval=0.1,
    )

    assert samples[("django_workers_runs_started_total", (("queue", "default"),))] == 1
    key = (
        "django_workers_run_duration_seconds_count",
        (("queue", "default"), ("status", "COMPLETED")),
    )
    assert samples[key] == 1
    # The process's own metrics come with them, from prometheus_client's default registry.
    assert any(name == "process_cpu_seconds_total" for name, _labels in samples)


def test_each_of_the_processes_serves_on_its_own_port(worker_processes: WorkerProcesses) -> None:
    first = free_ports(2)
    worker_processes.start("--processes", "2", "--metrics-port", str(first))
    worker_processes.wait_registered(2)

    for port in (first, first + 1):
        # mypy infers no lambda with a default argument.
        samples = wait_until(
            lambda port=port: scrape(port),  # type: ignore[misc]
            timeout=10,
            interval=0.1,
        )
        assert ("process_cpu_seconds_total", ()) in samples


def test_a_port_in_use_stops_the_start_saying_so(worker_processes: WorkerProcesses) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = worker_processes.start("--metrics-port", str(port))
        assert worker.wait(30) == 1
    assert f"Cannot serve metrics on port {port}" in worker.log()
    assert "choose another --metrics-port" in worker.log()
