"""``manage.py runworkers``: serve tasks until SIGTERM/SIGINT (or, with --burst, until done).

Thin by design: validate options, configure logging from --verbosity, build
the runtime (or a supervisor of several processes), run it.

Exit codes: 0 stopped cleanly; 1 could not start (database unreachable,
bad settings); 2 bad command-line arguments; 3 the drain deadline passed with
runs still going (left to the zombie sweep); 130 a second signal forced exit.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from django_workers.conf import queue_limits, workers_settings
from django_workers.runtime.process import build_runtime, configure_logging, install_signal_handlers
from django_workers.stores import default_store


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def seconds(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {value}")
    return number


def queue_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more queue names separated by commas")
    return names


def _workers_database() -> list[str]:
    alias = workers_settings.DATABASE
    return [alias] if isinstance(alias, str) and alias in settings.DATABASES else []


class Command(BaseCommand):
    help = "Run django-workers: claim and execute background tasks from the database."
    # Run in handle() instead, with the database checks (migrations applied), as migrate does.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queues", type=queue_list, default=None, help="Comma-separated queues (default: all)."
        )
        parser.add_argument(
            "--concurrency", type=positive_int, default=4, help="Run threads per process."
        )
        parser.add_argument(
            "--processes", type=positive_int, default=1, help="Worker processes to start."
        )
        parser.add_argument(
            "--drain-timeout",
            type=seconds,
            default=30.0,
            help="Seconds to let running tasks finish after SIGTERM.",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit when no task is left to run."
        )
        parser.add_argument(
            "--no-recover-zombies",
            action="store_true",
            help="Do not recover the tasks of dead workers.",
        )
        parser.add_argument(
            "--poll-interval",
            type=seconds,
            default=None,
            help="Idle poll interval in seconds where LISTEN/NOTIFY is unavailable.",
        )
        parser.add_argument("--skip-checks", action="store_true", help="Skip system checks.")

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        # The database first: the checks read it, and an unreachable one would fail them
        # with a traceback instead of this one message.
        for alias in _workers_database():
            self._check_database(alias)
        if not options["skip_checks"]:
            self.check(databases=_workers_database())
        store = default_store()
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
            self._banner(store, options, runtime.worker_id)
            code = runtime.run(drain_timeout=options["drain_timeout"])
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

    def _banner(self, store: Any, options: dict[str, Any], worker_id: str = "") -> None:
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
            f"  wake-up:     {'LISTEN/NOTIFY' if vendor == 'postgresql' else 'polling'}",
        ]
        if limits:
            lines.append(f"  limits:      {', '.join(f'{q}={n}' for q, n in limits.items())}")
        if options["burst"]:
            lines.append("  mode:        burst (exits when nothing is left)")
        self.stdout.write("\n".join(lines))
