"""``runworkers`` subprocesses on the private cluster: started, killed, stopped, read.

The pool remembers every process it killed with SIGKILL and when, which is
what the invariant checker needs to tell a recovery from a duplicate run.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.utils import timezone

from tests.helpers import WorkerSubprocess, wait_until

#: DJANGO_WORKERS of the fault suite's workers: quick polls, quick retries, short leases.
FAULT_SETTINGS: dict[str, Any] = {
    "LEASE_TIMEOUT": 2.0,
    "HEARTBEAT_INTERVAL": 0.5,
    "POLL_INTERVAL": 0.05,
    "RETRY_BACKOFF": 0.1,
    "RETRY_BACKOFF_MAX": 1.0,
}

#: One line of a worker's log: time, level, logger, [pid], message.
LOG_LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (?P<level>[A-Z]+) "
    r"(?P<logger>[\w.]+) \[(?P<pid>\d+)\] (?P<message>.*)$"
)
#: The logger of the per-task lines (ends, retries): not about the worker itself.
TASK_LOGGER = "django_workers.runtime.tasks"


@dataclass
class LogLine:
    level: str
    logger: str
    message: str


@dataclass
class FaultWorkers:
    """Starts ``runworkers`` on ``database_url``; kills, stops and reads them; kills the rest."""

    log_dir: Path
    database_url: str
    settings: dict[str, Any] = field(default_factory=lambda: dict(FAULT_SETTINGS))
    started: list[WorkerSubprocess] = field(default_factory=list)
    #: pid -> when it was killed (SIGKILL): its runs may be recovered and run again.
    killed: dict[int, datetime] = field(default_factory=dict)

    def start(self, *args: str) -> WorkerSubprocess:
        """Start ``runworkers *args`` (e.g. ``--queues a,b --concurrency 4``)."""
        env = {
            "DATABASE_URL": self.database_url,
            "WORKERS_TEST_SETTINGS": json.dumps(self.settings),
        }
        log_path = self.log_dir / f"runworkers-{len(self.started)}.log"
        process = WorkerSubprocess(args, log_path, env=env)
        self.started.append(process)
        return process

    def live(self) -> list[WorkerSubprocess]:
        return [p for p in self.started if p.popen.poll() is None]

    def kill(self, process: WorkerSubprocess) -> None:
        """SIGKILL ``process`` (and what it started), as a crash would; remember it."""
        process.kill()
        self.killed[process.pid] = timezone.now()

    def terminate(self, process: WorkerSubprocess, timeout: float = 60.0) -> int:
        """SIGTERM ``process`` (a drain) and return its exit code."""
        process.send(signal.SIGTERM)
        return process.wait(timeout)

    def wait_registered(
        self, processes: Sequence[WorkerSubprocess], using: str, timeout: float = 30.0
    ) -> None:
        """Wait until each of ``processes`` holds a lease (a runtime writes one at start)."""
        from django_workers.models import WorkerProcess as Lease

        pids = {p.pid for p in processes}
        leases = Lease.objects.using(using).filter(pid__in=pids)

        def registered() -> bool:
            return set(leases.values_list("pid", flat=True)) == pids

        try:
            wait_until(registered, timeout, interval=0.05)
        except AssertionError:
            logs = "\n".join(f"--- {p.pid}:\n{p.log()}" for p in processes)
            raise AssertionError(
                f"workers {sorted(pids)} never registered; logs:\n{logs}"
            ) from None

    def kill_all(self) -> None:
        for process in self.started:
            with contextlib.suppress(Exception):
                process.kill()


def log_lines(text: str) -> list[LogLine]:
    """The logging lines of a worker's output (its banner and tracebacks left out)."""
    lines = []
    for raw in text.splitlines():
        match = LOG_LINE.match(raw)
        if match:
            lines.append(LogLine(match["level"], match["logger"], match["message"]))
    return lines
