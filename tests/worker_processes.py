"""Other processes for the tests: ``runworkers`` and handle scripts on the test database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import session_database_env

ROOT = Path(__file__).resolve().parent.parent

#: Opens a handle as Owner(argv[2]) on task argv[1], cancels it if argv[3] says so,
#: waits for the end and prints what it saw as JSON.
HANDLE_SCRIPT = """
import json, sys
import django
django.setup()
from django_workers import Owner, open_task
handle = open_task(sys.argv[1], Owner(sys.argv[2]))
if sys.argv[3] == "cancel":
    handle.cancel()
info = handle.wait(timeout=30)
print(json.dumps({
    "status": info.status,
    "run_id": info.run_id,
    "result": info.result,
    "error": info.error.type if info.error else None,
    "cancel_reason": info.cancel_reason,
}))
"""


def process_env() -> dict[str, str]:
    """The environment a child needs to use this test session's database."""
    env = session_database_env()
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    return env


def start_burst(*args: str) -> subprocess.Popen[str]:
    """Start ``manage.py runworkers --burst`` as a real subprocess."""
    command = [sys.executable, "-m", "django", "runworkers", "--burst", "--settings=tests.settings"]
    return subprocess.Popen(
        [*command, *args],
        env=process_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 60.0) -> tuple[str, str]:
    """Wait for a child to exit 0 and return its (stdout, stderr); fail the test otherwise."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"{process.args!r} did not end within {timeout} s:\n{err}") from None
    assert process.returncode == 0, f"{process.args!r} exited {process.returncode}:\n{err}"
    return out, err


def run_burst(*args: str, timeout: float = 60.0) -> tuple[str, str]:
    """Run ``manage.py runworkers --burst`` to its end; fails the test if it fails."""
    return finish(start_burst(*args), timeout)


def start_handle_script(task_id: str, user_id: str, action: str = "wait") -> subprocess.Popen[str]:
    """Start a process that opens a handle on ``task_id`` as ``user_id`` (see HANDLE_SCRIPT)."""
    return subprocess.Popen(
        [sys.executable, "-c", HANDLE_SCRIPT, task_id, user_id, action],
        env=process_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def output_of(process: subprocess.Popen[str], timeout: float = 60.0) -> dict[str, Any]:
    """Wait for a handle script and return the JSON it printed."""
    out, _err = finish(process, timeout)
    return json.loads(out.strip().splitlines()[-1])
