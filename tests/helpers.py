"""Test helpers: waiting with a deadline, a runtime on a thread, runworkers subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from django.db import connection, connections

from django_workers import clock, lifecycle
from django_workers.backends import context_of
from django_workers.info import TaskInfo, TaskStatus
from django_workers.runtime.runtime import WorkerRuntime
from django_workers.stores import WorkerStore


def wait_until[T](
    predicate: Callable[[], T | Literal[False] | None],
    timeout: float = 10.0,
    interval: float = 0.01,
) -> T:
    """Poll ``predicate`` until it returns something truthy; return it, or fail at the deadline.

    Typed as returning what the predicate gives besides False and None: it never returns those.
    """
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


def end_record(
    store: WorkerStore,
    task_id: str,
    status: TaskStatus = TaskStatus.COMPLETED,
    *,
    finished_at: Any = None,
    **fields: Any,
) -> TaskInfo:
    """End the current run of ``task_id`` through the real claim and end path; return it."""
    info = store.get_task_info(task_id)
    assert info is not None
    when = finished_at or clock.now()
    if status == TaskStatus.CANCELLED:
        assert store.end_tasks([lifecycle.cancel_end(info, when)]) == [True]
    else:
        if info.status == TaskStatus.PENDING:
            claimed = store.claim("w-end-record", [info.queue], 1000, clock.now())
            others = [c for c in claimed if c.id != task_id]
            store.end_tasks([lifecycle.release_end(c, "w-end-record") for c in others])
            [info] = [c for c in claimed if c.id == task_id]
        assert info.worker_id is not None
        if not fields:
            fields = (
                {"result": {"answer": 42}}
                if status == TaskStatus.COMPLETED
                else {"error": {"type": "E", "message": "failed"}}
            )
        end = lifecycle.run_end(info, info.worker_id, status, when, **fields)
        assert store.end_tasks([end]) == [True]
    ended = store.get_task_info(task_id)
    assert ended is not None
    return ended


def answer_in_forked_child(question: Callable[[], bool]) -> bool | None:
    """Fork, ask ``question()`` in the child and return its answer (None if it raised)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.write(write, b"1" if question() else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    return {b"1": True, b"0": False}.get(answer)


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
    options.setdefault("context_factory", context_of)
    return RuntimeThread(WorkerRuntime(store, **options), drain_timeout).start()


def runtime_threads() -> list[threading.Thread]:
    """Threads a runtime started that are still alive (named ``workers-*``)."""
    return [t for t in threading.enumerate() if t.name.startswith("workers-") and t.is_alive()]


# -- runworkers subprocesses (integration tests) ---------------------------------------------

ROOT = Path(__file__).resolve().parent.parent

#: DJANGO_WORKERS of every worker subprocess: leases short enough for a test to outlive.
CHILD_SETTINGS: dict[str, Any] = {
    "LEASE_TIMEOUT": 2.0,
    "HEARTBEAT_INTERVAL": 0.5,
    "POLL_INTERVAL": 0.05,
    "QUEUES": {"seq": {"concurrency": 1}},
}


def child_env() -> dict[str, str]:
    """The environment of a ``runworkers`` child: this session's database, short leases."""
    env = session_database_env()
    env["PYTHONUNBUFFERED"] = "1"
    env["WORKERS_TEST_SETTINGS"] = json.dumps(CHILD_SETTINGS)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def session_database_env() -> dict[str, str]:
    """This process's environment, pointed at this test session's database."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    name = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite":
        env["WORKERS_SQLITE_PATH"] = name
    else:
        url = urlsplit(os.environ["DATABASE_URL"])
        env["DATABASE_URL"] = urlunsplit(url._replace(path=f"/{name}"))
    return env


class WorkerSubprocess:
    """One ``manage.py runworkers`` subprocess, its output in a log file."""

    def __init__(
        self,
        args: Sequence[str],
        log_path: Path,
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        """``prefix`` goes before the command (``faketime -f +120s``); ``env`` adds variables."""
        self.args = list(args)
        self.log_path = log_path
        command = [sys.executable, "-m", "django", "runworkers", *args, "--settings=tests.settings"]
        with log_path.open("wb") as log:
            # Its own session, so that teardown can kill it with every process it started.
            self.popen = subprocess.Popen(
                [*prefix, *command],
                cwd=ROOT,
                env={**child_env(), **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def send(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL the process and everything it started, as a crash would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10.0)

    def wait(self, timeout: float) -> int:
        """Wait for the exit and return its code; fail with the log if it takes longer."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"runworkers {self.args} still running after {timeout} s:\n{self.log()}"
            ) from None

    def wait_for_log(self, text: str, timeout: float = 10.0) -> None:
        try:
            wait_until(lambda: text in self.log(), timeout)
        except AssertionError:
            raise AssertionError(f"{text!r} never logged; log:\n{self.log()}") from None


class WorkerProcesses:
    """Starts runworkers subprocesses on the test database and kills what is left at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[WorkerSubprocess] = []

    def start(
        self, *args: str, prefix: Sequence[str] = (), env: dict[str, str] | None = None
    ) -> WorkerSubprocess:
        """Start ``runworkers *args``; ``wait_registered`` tells when it serves."""
        log_path = self.log_dir / f"runworkers-{len(self.started)}.log"
        process = WorkerSubprocess(args, log_path, prefix, env)
        self.started.append(process)
        return process

    def wait_registered(self, count: int, timeout: float = 20.0) -> None:
        """Wait until ``count`` runtimes hold a lease (each runtime writes one at start)."""
        from django_workers.models import WorkerProcess as Lease

        try:
            wait_until(lambda: Lease.objects.count() >= count, timeout, interval=0.05)
        except AssertionError:
            logs = "\n".join(p.log() for p in self.started)
            raise AssertionError(f"{count} workers never registered; logs:\n{logs}") from None

    def kill_all(self) -> None:
        for process in self.started:
            process.kill()


# -- users and clients of the web pages ----------------------------------------------------


def client_for(user: Any) -> Any:
    """A DRF test client signed in as ``user`` (anonymous for None)."""
    from rest_framework.test import APIClient

    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def make_user(name: str, *, staff: bool = True, manager: bool = False, su: bool = False) -> Any:
    """A user of the admin: staff by default; ``manager`` holds ``manage_all_tasks``."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(name, is_staff=staff, is_superuser=su)
    if manager:
        user.user_permissions.add(Permission.objects.get(codename="manage_all_tasks"))
    return user
