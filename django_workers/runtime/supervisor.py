"""``runworkers --processes P``: P worker processes, each one runtime, watched by this one.

Each child is a fresh interpreter (multiprocessing "spawn") that sets Django up
and runs a ``WorkerRuntime``. The supervisor forwards a stop on SIGTERM/SIGINT
(as SIGUSR1, ``FORWARDED_STOP``), restarts a child that died unexpectedly (its
runs are recovered by the zombie sweep) after a delay that doubles while
children keep dying soon after they start, and on a second signal kills the
children and exits at once. A child takes the group's signal and the forwarded
stop as one stop request, however far apart its handlers run.

A child is born with the stop signals blocked and unblocks them once its handlers
are in place: a stop that reaches it while it is still starting waits for them
instead of killing it. Once its runtime has returned it ignores the forwarded stop,
which would otherwise kill it while the interpreter exits (Python puts the default
signal actions back then).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import signal
import time
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Any

from django_workers.runtime.process import EXIT_FORCED, FORWARDED_STOP

logger = logging.getLogger(__name__)

#: Seconds a supervisor waits before restarting a child that died, doubled for each
#: child in a row that died within STABLE seconds of its start, up to RESTART_DELAY_MAX.
RESTART_DELAY = 1.0
RESTART_DELAY_MAX = 60.0
STABLE = 60.0

#: The signals that stop a worker process: held back until its handlers are installed.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, FORWARDED_STOP})


def _child_main(options: dict[str, Any], index: int = 0) -> None:
    import django

    django.setup()
    from django_workers.database_checks import workers_databases
    from django_workers.runtime.process import (
        SAME_STOP_WINDOW,
        bound_connect_timeouts,
        build_runtime,
        configure_logging,
        install_forwarded_stop,
        install_signal_handlers,
        serve_metrics,
    )

    configure_logging(options["verbosity"])
    bound_connect_timeouts(workers_databases())
    try:
        runtime = build_runtime(options)
    except Exception as e:  # one line per failed start; the supervisor retries with backoff
        logger.error("Worker process %s could not start: %r", os.getpid(), e)
        logger.debug("Why the worker process could not start", exc_info=True)
        raise SystemExit(1) from None
    if options.get("metrics_port") is not None:
        # Each slot keeps its port across restarts: process i serves on N + i.
        try:
            serve_metrics(options["metrics_port"] + index)
        except OSError as e:
            logger.error("Worker process %s could not start: %s", os.getpid(), e)
            raise SystemExit(1) from None
    # The group's signal and the supervisor's forwarded one are one stop request.
    install_signal_handlers(runtime.request_stop, same_stop_window=SAME_STOP_WINDOW)
    install_forwarded_stop(runtime.request_stop)
    # A stop sent while this process was starting is delivered now, to its handler.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    code = runtime.run(drain_timeout=options["drain_timeout"])
    # Nothing is left to stop: a forward that comes late must not kill the exit.
    signal.signal(FORWARDED_STOP, signal.SIG_IGN)
    raise SystemExit(code)


def _how_it_ended(exitcode: int) -> str:
    if exitcode >= 0:
        return f"exited with {exitcode}"
    try:
        return f"was killed by {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"was killed by signal {-exitcode}"


@dataclass
class _Slot:
    """One of the supervisor's worker processes, and how its restarts have gone."""

    child: multiprocessing.process.BaseProcess
    started: float
    #: Which of the supervisor's processes this is, from 0: its metrics port's offset.
    index: int = 0
    failures: int = 0
    restart_at: float | None = None


def restart_delay(failures: int) -> float:
    """Seconds before restarting after ``failures`` quick deaths in a row: doubling, jittered."""
    delay = min(RESTART_DELAY * 2.0 ** min(failures - 1, 16), RESTART_DELAY_MAX)
    return delay / 2 + random.uniform(0, delay / 2)


class Supervisor:
    """Starts and watches the worker processes."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = {
            k: options[k]
            for k in (
                "queues",
                "concurrency",
                "no_recover_zombies",
                "burst",
                "poll_interval",
                "drain_timeout",
                "verbosity",
                "metrics_port",
                "context_factory",
            )
        }
        self.count = options["processes"]
        self._context = multiprocessing.get_context("spawn")
        self._children: list[multiprocessing.process.BaseProcess] = []
        self._signals = 0

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        slots = [_Slot(self._start_child(i), time.monotonic(), i) for i in range(self.count)]
        self._children = [slot.child for slot in slots]
        while True:
            for slot in slots:
                self._watch(slot)
            self._children = [slot.child for slot in slots]
            if all(slot.restart_at is None and not slot.child.is_alive() for slot in slots):
                break
            time.sleep(0.2)
        for child in self._children:
            if child.exitcode not in (0, None):
                logger.warning("Worker process %s %s", child.pid, _how_it_ended(child.exitcode))
        # A child killed by a signal has a negative exit code: that is a failure too.
        codes = [1 if (c.exitcode or 0) < 0 else (c.exitcode or 0) for c in self._children]
        return max(codes, default=0)

    def _watch(self, slot: _Slot) -> None:
        """Restart the slot's child if it died unexpectedly, once its delay has passed."""
        child, now = slot.child, time.monotonic()
        if self._signals or self.options["burst"]:
            slot.restart_at = None
        elif slot.restart_at is not None:
            if now >= slot.restart_at:
                slot.child, slot.started, slot.restart_at = self._start_child(slot.index), now, None
        elif not child.is_alive() and child.exitcode not in (None, 0, 3):
            lived = now - slot.started
            slot.failures = 1 if lived >= STABLE else slot.failures + 1
            delay = restart_delay(slot.failures)
            slot.restart_at = now + delay
            logger.warning(
                "Worker process %s %s after %.1f s; restarting in %.1f s",
                child.pid,
                _how_it_ended(child.exitcode or 0),
                lived,
                delay,
            )

    def _start_child(self, index: int) -> multiprocessing.process.BaseProcess:
        child = self._context.Process(
            target=_child_main, args=(self.options, index), name="runworkers-child"
        )
        # multiprocessing (re)starts its resource tracker when it starts a child, and then
        # unblocks SIGINT and SIGTERM: started before the block, it cannot undo it.
        resource_tracker.ensure_running()
        # The child inherits the blocked set and unblocks it once it can drain.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            child.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        logger.info("Started worker process %s", child.pid)
        return child

    def _on_signal(self, signum: int, frame: Any) -> None:
        # The supervisor counts the signals a person (or a service manager) sends: each
        # reaches it once, whether sent to it alone or to the whole process group.
        self._signals += 1
        if self._signals > 1:
            logger.warning("Second signal: killing the worker processes and exiting now.")
            for child in self._children:
                if child.pid and child.is_alive():
                    os.kill(child.pid, signal.SIGKILL)
            os._exit(EXIT_FORCED)
        logger.info(
            "Got %s: stopping the worker processes; send it again to exit at once.",
            signal.Signals(signum).name,
        )
        # Forwarded even if the children got the group's copy too: the forwarded stop is
        # a signal of its own, which a child never takes for a second, forcing one.
        for child in self._children:
            if child.pid and child.is_alive():
                os.kill(child.pid, FORWARDED_STOP)
