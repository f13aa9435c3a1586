"""Without Chromium the browser tests skip and say how to install it; with ``CI`` set they fail.

Runs pytest on one browser test as a subprocess whose ``PATH`` holds only the
virtualenv's tools, so neither ``chromium`` nor ``chromedriver`` is found.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.integration

BROWSER_TEST = (
    "tests/integration/test_admin_browser.py::test_watch_a_task_advance_and_cancel_it_from_its_page"
)
INSTALL = "apt-get install chromium chromium-driver"


def run_without_browser(*, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PATH"] = str(Path(sys.executable).parent)
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", BROWSER_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_a_browser_the_test_skips_and_the_summary_names_the_install_command() -> None:
    run = run_without_browser(ci=False)
    assert run.returncode == 0, run.stdout + run.stderr
    summary = run.stdout[run.stdout.index("short test summary") :]
    assert "SKIPPED" in summary
    assert INSTALL in summary


def test_in_ci_a_missing_browser_is_a_failure() -> None:
    run = run_without_browser(ci=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "CI is set, so a missing browser is a failure" in run.stdout
    assert INSTALL in run.stdout
