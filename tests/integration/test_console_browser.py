"""The operator's console in a real browser: live pages, retry, the queues page, task_progress.

Headless Chromium with Selenium, as ``test_admin_browser.py`` (whose fixture,
shared by ``conftest.py``, and login it uses), against a live server and real ``runworkers``
subprocesses; the example project's reports page runs as the example project
itself (``runserver`` and ``runworkers`` on a copy of it). Screenshots go to
``test-artifacts/admin/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from django_workers import Owner, System, TaskStatus, get_task_status, submit_task
from django_workers.stores import default_store
from tests.helpers import ROOT, WorkerProcesses, wait_for_status, wait_until
from tests.integration.test_admin_browser import PASSWORD, artifacts_dir, log_in

pytestmark = pytest.mark.integration


def task_page(live_server: Any, task_id: str) -> str:
    return live_server.url + reverse(
        "admin:django_workers_taskrecord_change", args=[quote(task_id)]
    )


def live_progress(driver: Any) -> float:
    """The page's progress bar value, read in one step: the script replaces the bar."""
    return float(
        driver.execute_script("return document.querySelector('progress.dw-progress').value;")
    )


def same_page(driver: Any) -> bool:
    """Whether the page the marker was set on is still the one shown (no reload since)."""
    return bool(driver.execute_script("return window.dwNotReloaded === true;"))


def test_a_running_tasks_page_advances_without_a_reload_and_reloads_once_it_ends(
    browser: Any, live_server: Any, worker_processes: WorkerProcesses
) -> None:
    user = User.objects.create_superuser("ada", password=PASSWORD)
    task_id = submit_task(
        "long-export", "tests.tasks.creep_until_cancelled", Owner.for_user(user), args=[0.2]
    )
    worker_processes.start()
    worker_processes.wait_registered(1)
    wait_for_status(default_store(), task_id, TaskStatus.RUNNING, timeout=20)
    log_in(browser, live_server, "ada")

    browser.get(task_page(live_server, task_id))
    browser.execute_script("window.dwNotReloaded = true;")
    first = live_progress(browser)
    wait_until(lambda: live_progress(browser) >= first + 3, timeout=20, interval=0.2)
    assert same_page(browser)
    attempts = browser.find_element("css selector", ".field-attempts_display .readonly")
    assert attempts.text == "1 of 1"
    # The status as the read-only field shows it, by its label.
    assert browser.find_element("css selector", ".field-status_display .readonly").text == "Running"
    browser.save_screenshot(str(artifacts_dir() / "task-live.png"))

    from django_workers import cancel_task

    cancel_task(task_id, System())  # from elsewhere: the page sees it end and reloads
    wait_until(lambda: not same_page(browser), timeout=20, interval=0.2)
    wait_until(lambda: "CANCELLED" in browser.page_source, timeout=10)
    assert "dw-cancel" not in browser.page_source


def test_a_failed_task_runs_again_from_its_page(
    browser: Any, live_server: Any, worker_processes: WorkerProcesses
) -> None:
    from selenium.webdriver.common.by import By

    user = User.objects.create_superuser("bea", password=PASSWORD)
    task_id = submit_task("breaks", "tests.tasks.fail", Owner.for_user(user))
    worker_processes.start()
    worker_processes.wait_registered(1)
    first = wait_for_status(default_store(), task_id, TaskStatus.FAILED, timeout=20)
    log_in(browser, live_server, "bea")

    browser.get(task_page(live_server, task_id))
    browser.find_element(By.CSS_SELECTOR, "button.dw-retry").click()

    wait_until(lambda: "will run again (it was FAILED" in browser.page_source, timeout=10)
    browser.save_screenshot(str(artifacts_dir() / "task-retried.png"))
    again = wait_until(
        lambda: (
            (info := get_task_status(task_id, System())).run_id != first.run_id
            and info.status == TaskStatus.FAILED
            and info
        ),
        timeout=20,
        interval=0.1,
    )
    assert again.attempts == 1
    # The page followed the new run to its end by itself, and offers the button again.
    wait_until(lambda: "dw-retry" in browser.page_source, timeout=20, interval=0.2)


def queue_rows(driver: Any) -> dict[str, dict[str, Any]]:
    """The queues page's figures, by queue, as numbers (None for "-")."""
    from selenium.webdriver.common.by import By

    found: dict[str, dict[str, Any]] = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#dw-queues tr.dw-queue"):
        figures: dict[str, Any] = {}
        for cell in row.find_elements(By.CSS_SELECTOR, "[data-figure]"):
            name = cell.get_attribute("data-figure")
            text = cell.get_attribute("data-value")
            text = cell.text if text is None else text
            figures[name] = None if text in ("", "-") else float(text)
        figures["workers"] = [
            li.get_attribute("data-worker") for li in row.find_elements(By.CSS_SELECTOR, "li")
        ]
        found[row.get_attribute("data-queue")] = figures
    return found


def test_the_queues_page_shows_the_figures_of_workers_status(
    browser: Any, live_server: Any, worker_processes: WorkerProcesses
) -> None:
    User.objects.create_superuser("cy", password=PASSWORD)
    worker_processes.start("--queues", "default")
    worker_processes.wait_registered(1)
    done = submit_task("done", "tests.tasks.add", System(), args=[1, 2], scope="global")
    broke = submit_task("broke", "tests.tasks.fail", System(), scope="global")
    wait_for_status(default_store(), done, TaskStatus.COMPLETED, timeout=20)
    wait_for_status(default_store(), broke, TaskStatus.FAILED, timeout=20)
    for n in range(3):
        submit_task(
            f"wait-{n}", "tests.tasks.add", System(), args=[n, 1], scope="global", queue="nobody"
        )
    log_in(browser, live_server, "cy")

    browser.get(live_server.url + reverse("admin:django_workers_queues"))
    shown = queue_rows(browser)
    out = StringIO()
    call_command("workers", "status", "--json", stdout=out)
    reported = {q["queue"]: q for q in json.loads(out.getvalue())["queues"]}
    browser.save_screenshot(str(artifacts_dir() / "queues.png"))

    assert set(shown) == set(reported) == {"default", "nobody"}
    for name, figures in shown.items():
        for figure, value in figures.items():
            expected = reported[name][figure]
            if figure == "oldest_pending_age":
                assert (value is None) == (expected is None)
                assert value is None or abs(value - expected) < 10
            else:
                assert value == expected, (name, figure)
    assert (shown["default"]["completed_5m"], shown["default"]["failed_5m"]) == (1, 1)
    assert shown["nobody"]["pending"] == 3
    assert "no live worker serves this queue" in browser.page_source


# -- the example project's reports page --------------------------------------------------------

EXAMPLE = ROOT / "example_project"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def example_site(tmp_path: Path) -> Iterator[str]:
    """The example project on a copy of itself: migrated, a user, runserver and runworkers."""
    site = tmp_path / "example"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns("db.sqlite3*", "__pycache__"))
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"

    def manage(*args: str) -> None:
        subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=site,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )

    manage("migrate", "--no-input")
    manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; "
        f"User.objects.create_user('reader', password={PASSWORD!r})",
    )
    port = free_port()
    processes = []
    logs = []
    with contextlib.ExitStack() as stack:
        for name, args in [
            ("runserver", ["runserver", f"127.0.0.1:{port}", "--noreload"]),
            ("runworkers", ["runworkers", "--queues", "reports", "--concurrency", "2"]),
        ]:
            log = stack.enter_context((tmp_path / f"{name}.log").open("wb"))
            logs.append(tmp_path / f"{name}.log")
            processes.append(
                subprocess.Popen(
                    [sys.executable, "manage.py", *args],
                    cwd=site,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        url = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return True
            return False

        try:
            wait_until(answers, timeout=30, interval=0.2)
            wait_until(lambda: b"django-workers" in logs[1].read_bytes(), timeout=30, interval=0.2)
            yield url
        except AssertionError:
            raise AssertionError("\n".join(p.read_text(errors="replace") for p in logs)) from None
        finally:
            for process in processes:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
                process.wait(10)


def test_the_example_reports_page_follows_a_report_and_cancels_another(
    browser: Any, example_site: str
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(example_site + "/reports/")  # sends to the login page, and back
    browser.find_element(By.NAME, "username").send_keys("reader")
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_until(lambda: browser.current_url.endswith("/reports/"), timeout=10)
    for _ in range(2):
        browser.find_element(By.ID, "start-report").click()
        wait_until(lambda: browser.current_url.endswith("/reports/"), timeout=10)
    browser.execute_script("window.dwNotReloaded = true;")
    boxes = browser.find_elements(By.CSS_SELECTOR, "#reports div.dw-task")
    assert len(boxes) == 2
    watched, other = boxes  # newest first

    def percent(box: Any) -> float:
        return float(box.find_element(By.CSS_SELECTOR, "progress").get_attribute("value"))

    wait_until(lambda: percent(watched) >= 10 and percent(other) > 0, timeout=30, interval=0.2)
    other.find_element(By.CSS_SELECTOR, "button.dw-task-cancel").click()
    wait_until(lambda: other.get_attribute("data-dw-status") == "CANCELLED", timeout=10)
    assert "Cancelled by user" in other.find_element(By.CSS_SELECTOR, ".dw-task-outcome").text
    # A poll may show the end before the cancel's own answer arrives and says so.
    wait_until(
        lambda: other.find_element(By.CSS_SELECTOR, ".dw-task-message").text == "Cancelled.",
        timeout=10,
        interval=0.1,
    )
    browser.save_screenshot(str(artifacts_dir() / "example-reports.png"))

    wait_until(
        lambda: watched.get_attribute("data-dw-status") == "COMPLETED", timeout=40, interval=0.3
    )
    assert watched.find_element(By.CSS_SELECTOR, ".dw-task-outcome").text == 'Result: {"pages":40}'
    assert percent(watched) == 100
    assert not watched.find_element(By.CSS_SELECTOR, "button.dw-task-cancel").is_displayed()
    assert same_page(browser)
    browser.save_screenshot(str(artifacts_dir() / "example-reports-done.png"))
