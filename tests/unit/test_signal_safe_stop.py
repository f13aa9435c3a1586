"""A stop signal handled while the main thread holds the runtime's stop flag never hangs.

The group's SIGINT and the supervisor's forwarded stop reach a worker process
together, so the second handler can run inside the first one's ``request_stop``.
Each case runs in a child process: a hang there is a timeout here, not a stuck suite.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers import ROOT, child_env

CHILD = textwrap.dedent(
    """
    import signal

    import django

    django.setup()
    from django_workers.runtime.process import install_forwarded_stop, install_signal_handlers
    from django_workers.runtime.runtime import WorkerRuntime
    from django_workers.stores.memory import InMemoryWorkerStore

    runtime = WorkerRuntime(InMemoryWorkerStore(), concurrency=1)
    install_signal_handlers(runtime.request_stop)
    install_forwarded_stop(runtime.request_stop)
    flag = getattr(runtime, {flag!r})
    # The main thread is inside the flag's set, clear or wait when the signal lands.
    with flag._cond:
        signal.raise_signal(signal.{signal})
    assert runtime._stopping.is_set() and runtime._wake.is_set()
    print("stopped")
    """
)


@pytest.mark.parametrize("flag", ["_stopping", "_wake"])
@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM", "SIGUSR1"])
def test_a_stop_signal_sets_the_flags_the_interrupted_thread_holds(flag: str, signal: str) -> None:
    env = child_env()
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD.format(flag=flag, signal=signal)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=15.0,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{signal} handled inside {flag}'s lock hung the process")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
