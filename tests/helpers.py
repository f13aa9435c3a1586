"""Test helpers: waiting on a condition with a deadline, and a runtime on a background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from django_workers.info import TaskInfo, TaskStatus
from django_workers.runtime.runtime import WorkerRuntime
from django_workers.stores import WorkerStore


def wait_until[T](predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01) -> T:
    """Poll ``predicate`` until it returns something truthy; return it, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"Condition not met within {timeout} s: {predicate}")
        time.sleep(interval)


def wait_for_status(
    store: WorkerStore, task_id: str, *statuses: TaskStatus, timeout: float = 10.0
) -> TaskInfo:
    """Wait until the record of ``task_id`` is in one of ``statuses``; return it."""

    def reached() -> TaskInfo | None:
        info = store.get_task_info(task_id)
        return info if info is not None and info.status in statuses else None

    try:
        return wait_until(reached, timeout)
    except AssertionError:
        raise AssertionError(
            f"{task_id} never reached {statuses}; now {store.get_task_info(task_id)}"
        ) from None


class RuntimeThread:
    """A ``WorkerRuntime`` serving on a background thread, as ``runworkers`` would serve."""

    def __init__(self, runtime: WorkerRuntime, drain_timeout: float) -> None:
        self.runtime = runtime
        self.drain_timeout = drain_timeout
        self.exit_code: int | None = None
        self._thread = threading.Thread(target=self._serve, name="test-runtime", daemon=True)

    def _serve(self) -> None:
        try:
            self.exit_code = self.runtime.run(drain_timeout=self.drain_timeout)
        finally:
            connections.close_all()

    def start(self) -> RuntimeThread:
        self._thread.start()
        if not self.runtime.started.wait(10.0):
            raise AssertionError("The runtime did not start within 10 s")
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        """Ask the runtime to stop (SIGTERM's path) and return what ``run()`` returned."""
        self.runtime.request_stop()
        return self.join(timeout)

    def join(self, timeout: float = 10.0) -> int | None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"The runtime did not stop within {timeout} s")
        return self.exit_code

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


def start_runtime(
    store: WorkerStore, *, drain_timeout: float = 5.0, **options: Any
) -> RuntimeThread:
    """Build a fast-ticking runtime over ``store`` and start it on a thread."""
    options.setdefault("concurrency", 2)
    options.setdefault("poll_interval", 0.02)
    options.setdefault("heartbeat_interval", 0.2)
    options.setdefault("lease_timeout", 5.0)
    return RuntimeThread(WorkerRuntime(store, **options), drain_timeout).start()


def runtime_threads() -> list[threading.Thread]:
    """Threads a runtime started that are still alive (named ``workers-*``)."""
    return [t for t in threading.enumerate() if t.name.startswith("workers-") and t.is_alive()]
