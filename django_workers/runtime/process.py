"""The entry point of one worker process: its runtime, its logging, its stop signals.

``runworkers`` (one process) and each child of the supervisor (``--processes``)
build their process here; the management command only parses options.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from django_workers.runtime.runtime import WorkerRuntime

logger = logging.getLogger(__name__)

#: Exit code of a process that a second stop signal forced out.
EXIT_FORCED = 130

#: Seconds within which a child of the supervisor takes a repeated signal for the same stop.
#: A terminal's Ctrl-C or systemd signals the whole group: each process gets one copy,
#: but a copy the handler could only run after a blocking call still means one drain.
SAME_STOP_WINDOW = 2.0

#: What the supervisor sends its worker processes to stop them: a signal of its own, so
#: that with the group's SIGTERM or SIGINT it is one stop request, however late it runs.
FORWARDED_STOP = signal.SIGUSR1


#: libpq options a worker process's PostgreSQL connections get where DATABASES sets
#: none: a connect to a server cut off by the network gives up after 10 s instead of
#: the kernel's minutes, and a connection whose server vanished without a word (a
#: failover, a network cut) is found dead after about a minute instead of two hours.
CONNECTION_BOUNDS = {
    "connect_timeout": 10,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def bound_connect_timeouts(aliases: list[str]) -> None:
    """Bound how long this process's PostgreSQL connections wait for a silent server."""
    for alias in aliases:
        database = connections.settings[alias]
        if database.get("ENGINE", "").endswith("postgresql"):
            options = database.setdefault("OPTIONS", {})
            for name, value in CONNECTION_BOUNDS.items():
                options.setdefault(name, value)


def build_runtime(options: dict[str, Any], store: Any = None) -> WorkerRuntime:
    """Build the runtime one worker process runs, from the command's options."""
    return WorkerRuntime(
        store,
        queues=options["queues"],
        concurrency=options["concurrency"],
        recover_zombies=not options["no_recover_zombies"],
        burst=options["burst"],
        poll_interval=options["poll_interval"],
        # This runtime is its process: if it gets stuck it exits, and runs that outlive
        # its drain die with it.
        owns_process=True,
        context_factory=options.get("context_factory"),
    )


def check_metrics_port(port: int | None, processes: int) -> None:
    """Refuse ``--metrics-port`` without prometheus_client, or with ports past 65535."""
    from django.core.management.base import CommandError

    from django_workers import metrics

    if port is None:
        return
    if not metrics.available():
        raise CommandError(f"--metrics-port: {metrics.INSTALL_HINT}")
    if port + processes - 1 > 65535:
        raise CommandError(
            f"--metrics-port {port} with --processes {processes} needs ports {port} to "
            f"{port + processes - 1}, past 65535; choose a lower port."
        )


def serve_metrics(port: int) -> None:
    """Serve this worker process's metrics on ``port``; OSError says why it cannot."""
    from django_workers import metrics

    try:
        metrics.serve(port)
    except OSError as e:
        raise OSError(
            f"Cannot serve metrics on port {port} ({e.strerror or e}): choose another "
            "--metrics-port, or stop what listens there."
        ) from e
    logger.info("Serving Prometheus metrics on port %d", port)


def configure_logging(verbosity: int) -> None:
    """Send django_workers logs to stderr unless the site's LOGGING already handles them."""
    log = logging.getLogger("django_workers")
    log.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(
            _LineFormatter("%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s")
        )
        log.addHandler(handler)


class _LineFormatter(logging.Formatter):
    """logging's default line, with the date and time text made once a second, not per line.

    A busy worker logs a line for every task it ends, and ``strftime`` was a fair
    share of what a line costs.
    """

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or self.default_msec_format is None:
            return super().formatTime(record, datefmt)
        second, text = self._second
        if int(record.created) != second:
            second = int(record.created)
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (second, text)
        return self.default_msec_format % (text, record.msecs)


def install_signal_handlers(
    request_stop: Callable[[], None], *, same_stop_window: float = 0.0
) -> None:
    """Drain on the first SIGTERM/SIGINT; exit at once on a second one.

    A signal within ``same_stop_window`` seconds of the first is the same stop
    request arriving twice, and is ignored.
    """
    first: list[float] = []

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if not first:
            first.append(time.monotonic())
            logger.info("Got %s: stopping; send it again to exit at once.", name)
            request_stop()
        elif time.monotonic() - first[0] < same_stop_window:
            logger.debug("Got %s again at once: the same stop request, still draining.", name)
        else:
            logger.warning("Second signal: exiting now.")
            os._exit(EXIT_FORCED)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def install_forwarded_stop(request_stop: Callable[[], None]) -> None:
    """Drain when the supervisor forwards a stop; it never counts as a second signal."""

    def handler(signum: int, frame: Any) -> None:
        logger.debug("The supervisor asks this worker process to stop.")
        request_stop()

    signal.signal(FORWARDED_STOP, handler)
