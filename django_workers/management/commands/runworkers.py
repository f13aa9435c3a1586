"""``manage.py runworkers``: serve tasks until SIGTERM/SIGINT (or, with --burst, until done).

Thin by design: validate options, configure logging from --verbosity, build
the runtime (or a supervisor of several processes), run it. The exit codes
and what --verbosity changes are in ``EPILOG``, which ``--help`` prints.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    DjangoHelpFormatter,
)
from django.db import DatabaseError, connections

import django_workers
from django_workers.backends import context_of
from django_workers.conf import queue_limits, workers_settings
from django_workers.database_checks import missing_tables, workers_databases
from django_workers.management.arguments import port, positive_int, queue_list, seconds
from django_workers.notices import CHANNEL
from django_workers.runtime.outage import backoff_delay, unreachable
from django_workers.runtime.process import (
    bound_connect_timeouts,
    build_runtime,
    check_metrics_port,
    configure_logging,
    install_signal_handlers,
    serve_metrics,
)
from django_workers.runtime.runtime import WorkerRuntime
from django_workers.runtime.wakeup import notices_arrive, wake_up_text
from django_workers.stores import default_store

logger = logging.getLogger(__name__)

EPILOG = """\
verbosity (-v):
  0  warnings and errors only: failed tasks, database trouble, recovered workers
  1  also one line per task end and retry, and the start and stop of the worker
  2  also each task start, each stop request and the traceback of each failure
  -v sets the level of the logger django_workers (3 is the same as 2) and logs to
  stderr unless LOGGING already has a handler; per-task lines use the logger
  django_workers.runtime.tasks, so LOGGING can silence them alone.

database:
  a database that cannot be reached is waited for, at start (except with --burst)
  and while running, however long: one warning when it goes, one line when it is back

exit codes:
  0    stopped cleanly (a drain in which every task ended, or --burst with nothing left)
  1    could not start: a wrong setting, missing tables, or (--burst) no database
  2    bad command-line arguments
  3    the drain timeout passed with tasks still running (left to zombie recovery)
  4    stuck: the claim loop or end writer made no progress for longer than the lease
  5    lease taken: other workers recovered this one's tasks while they ran here
  130  a second SIGTERM/SIGINT forced an immediate exit
"""


class HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's order of options, with the epilog's lines kept as written."""


class Command(BaseCommand):
    help = "Run django-workers: claim and execute background tasks from the database."
    # Run in handle() instead, with the database checks (migrations applied), as migrate does.
    requires_system_checks: list[str] = []

    def get_version(self) -> str:
        return django_workers.__version__

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("epilog", EPILOG)
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queues",
            type=queue_list,
            default=None,
            help="Comma-separated queues to serve (default: all).",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=4,
            help="Run threads per process (default: %(default)s).",
        )
        parser.add_argument(
            "--processes",
            type=positive_int,
            default=1,
            help="Worker processes to start (default: %(default)s).",
        )
        parser.add_argument(
            "--drain-timeout",
            type=seconds,
            default=30.0,
            help="Seconds after SIGTERM for running tasks to end: each is asked to stop, and one "
            "that stops goes back to its queue (default: %(default)g).",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit when no task is left to run (default: off)."
        )
        parser.add_argument(
            "--no-recover-zombies",
            action="store_true",
            help="Do not recover the tasks of dead workers (default: recover them).",
        )
        parser.add_argument(
            "--poll-interval",
            type=seconds,
            default=None,
            help="Idle poll interval in seconds where LISTEN/NOTIFY is unavailable "
            "(default: DJANGO_WORKERS['POLL_INTERVAL'], 0.2).",
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            default=None,
            help="Serve this process's Prometheus metrics on this port; with --processes P, "
            "worker process i (0 to P-1) on port N+i (default: off; needs "
            "django-workers-db[metrics]).",
        )
        parser.add_argument("--skip-checks", action="store_true", help="Skip system checks.")

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        bound_connect_timeouts(workers_databases())
        # The database first: the checks read it, and an unreachable one would fail them
        # with a traceback instead of this one message.
        for alias in workers_databases():
            if options["burst"]:
                self._check_database(alias)
            else:
                self._wait_for_database(alias)
        if not options["skip_checks"]:
            self.check(databases=workers_databases())
            if problem := missing_tables():
                raise CommandError(problem)
        check_metrics_port(options["metrics_port"], options["processes"])
        store = default_store()
        # A takes_context task gets Django's TaskContext (a function: it pickles by name).
        options["context_factory"] = context_of
        if options["processes"] > 1:
            from django_workers.runtime.supervisor import Supervisor

            self._banner(store, options)
            code = Supervisor(options).run()
        else:
            try:
                runtime = build_runtime(options, store)
            except ValueError as e:  # the runtime refusing its settings (heartbeat vs lease)
                raise CommandError(str(e)) from e
            install_signal_handlers(runtime.request_stop)
            if options["metrics_port"] is not None:
                try:
                    serve_metrics(options["metrics_port"])
                except OSError as e:
                    raise CommandError(str(e)) from e
            # Once started: the runtime has checked by then that notices reach its LISTEN.
            code = runtime.run(
                drain_timeout=options["drain_timeout"],
                on_started=lambda: self._banner(store, options, runtime),
            )
        if code:
            sys.exit(code)

    def _check_database(self, alias: str) -> None:
        try:
            connections[alias].ensure_connection()
        except DatabaseError as e:
            raise CommandError(
                f"Cannot reach database {alias!r}: {e}. Check that the database server is "
                f"running and that DATABASES[{alias!r}] (engine, host, port, name, user) points "
                "at it, then start the workers again."
            ) from e

    def _wait_for_database(self, alias: str) -> None:
        """Wait for the database like a running worker would: one warning, then retries."""
        errors = 0
        while True:
            try:
                connections[alias].ensure_connection()
            except DatabaseError as e:
                if not unreachable(e):
                    raise
                errors += 1
                if errors == 1:
                    logger.warning(
                        "Cannot reach database %r (%s); waiting for it. Check that the "
                        "database server is running and that DATABASES[%r] points at it; "
                        "with --burst, runworkers exits instead of waiting",
                        alias,
                        str(e).strip().splitlines()[0] if str(e).strip() else e,
                        alias,
                    )
                try:
                    time.sleep(backoff_delay(errors, cap=10.0))
                except KeyboardInterrupt:
                    raise SystemExit(130) from None
                continue
            if errors:
                logger.info("Database %r reachable; starting", alias)
            return

    def _banner(
        self, store: Any, options: dict[str, Any], runtime: WorkerRuntime | None = None
    ) -> None:
        worker_id = runtime.worker_id if runtime is not None else ""
        alias = getattr(store, "using", None)
        vendor = connections[alias].vendor if alias else "memory"
        limits = queue_limits()
        queues = ", ".join(options["queues"]) if options["queues"] else "all"
        lines = [
            f"django-workers {worker_id}".rstrip(),
            f"  store:       {type(store).__name__} ({vendor}"
            + (f", alias {alias!r})" if alias else ")"),
            f"  queues:      {queues}",
            f"  concurrency: {options['concurrency']} threads x {options['processes']} processes",
            f"  wake-up:     {_wake_up(store, options['poll_interval'], runtime)}",
        ]
        if limits:
            lines.append(f"  limits:      {', '.join(f'{q}={n}' for q, n in limits.items())}")
        if options["metrics_port"] is not None:
            first, count = options["metrics_port"], options["processes"]
            ports = f"port {first}" if count == 1 else f"ports {first} to {first + count - 1}"
            lines.append(f"  metrics:     Prometheus on {ports}, all addresses")
        if options["burst"]:
            lines.append("  mode:        burst (exits when nothing is left)")
        self.stdout.write("\n".join(lines))


def _wake_up(store: Any, poll_interval: float | None, runtime: WorkerRuntime | None = None) -> str:
    """How an idle worker of this store learns of new work: the runtime's, once it started.

    Without a runtime (the supervisor of ``--processes``), a LISTEN is probed here
    as each worker process will probe its own.
    """
    if runtime is not None:
        return runtime.wake_up
    poll_interval = workers_settings.seconds("POLL_INTERVAL", poll_interval)
    params = store.listen_params()
    try:
        deaf = params is not None and not notices_arrive(params, CHANNEL, store.send_notice)
    except Exception as e:  # psycopg's or Django's: the banner never stops the start
        return f"LISTEN/NOTIFY, not checked ({e})"
    return wake_up_text(store, poll_interval, deaf=deaf)
