"""The admin in a real browser: watch a task advance and cancel it; see a workflow's DAG, cancel it.

Headless Chromium from Debian's ``chromium`` and ``chromium-driver`` packages,
driven with Selenium, against a live server and a real ``runworkers``
subprocess. Screenshots go to ``test-artifacts/admin/`` (or
``$WORKERS_TEST_ARTIFACTS/admin/``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.urls import reverse

from django_workers import Owner, System, TaskStatus, get_task_status, submit_task
from django_workers.workflow_svg import colours
from django_workers.workflows import Workflow, WorkflowInfo, get_workflow_status
from tests.helpers import ROOT, WorkerProcesses, wait_until

pytestmark = pytest.mark.integration

INSTALL_COMMAND = "apt-get install chromium chromium-driver"
INSTALL_HINT = (
    "The browser tests need headless Chromium and its driver: "
    f"`{INSTALL_COMMAND}` (Debian/Ubuntu) and `pip install -e .[dev]` for Selenium. "
    ".ci/run installs both."
)
PASSWORD = "browser-test-password"


def artifacts_dir() -> Path:
    root = Path(os.environ.get("WORKERS_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    path = root / "admin"
    path.mkdir(parents=True, exist_ok=True)
    return path


def browser_missing(reason: str) -> NoReturn:
    """Skip the test, saying how to install the browser; in CI (``$CI`` set) fail instead."""
    message = f"{INSTALL_HINT} ({reason})"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so a missing browser is a failure. {message}")
    pytest.skip(f"no headless browser: run `{INSTALL_COMMAND}`. {message}")


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium; without one the test skips (fails in CI), saying how to install it."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        browser_missing(str(e))
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        browser_missing(f"chromium: {binary}, chromedriver: {driver_path}")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    except Exception as e:  # the driver reports every start failure its own way
        pytest.fail(f"{INSTALL_HINT} Chromium did not start: {e}")
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def log_in(driver: Any, live_server: Any, username: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(live_server.url + reverse("admin:login"))
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_until(lambda: "/login/" not in driver.current_url, timeout=10)


def progress_of(driver: Any) -> float:
    from selenium.webdriver.common.by import By

    return float(
        driver.find_element(By.CSS_SELECTOR, "progress.dw-progress").get_attribute("value")
    )


def test_watch_a_task_advance_and_cancel_it_from_its_page(
    browser: Any, live_server: Any, worker_processes: WorkerProcesses
) -> None:
    from selenium.webdriver.common.by import By

    shots = artifacts_dir()
    user = User.objects.create_superuser("ada", password=PASSWORD)
    task_id = submit_task(
        "long-export", "tests.tasks.creep_until_cancelled", Owner.for_user(user), args=[0.2]
    )
    worker_processes.start()
    worker_processes.wait_registered(1)

    log_in(browser, live_server, "ada")

    browser.get(live_server.url + reverse("admin:django_workers_taskrecord_changelist"))
    assert task_id in browser.page_source
    browser.save_screenshot(str(shots / "task-list.png"))

    page = live_server.url + reverse(
        "admin:django_workers_taskrecord_change", args=[quote(task_id)]
    )

    def reload_progress() -> float:
        browser.get(page)
        return progress_of(browser)

    first = wait_until(reload_progress, timeout=20, interval=0.3)
    wait_until(lambda: reload_progress() > first + 2, timeout=20, interval=0.3)
    assert "RUNNING" in browser.page_source
    browser.save_screenshot(str(shots / "task-running.png"))

    browser.find_element(By.CSS_SELECTOR, "button.dw-cancel").click()
    wait_until(lambda: "was cancelled" in browser.page_source, timeout=10)
    assert "CANCELLED" in browser.page_source
    browser.save_screenshot(str(shots / "task-cancelled.png"))
    assert get_task_status(task_id, System()).status == TaskStatus.CANCELLED

    browser.get(live_server.url + reverse("admin:django_workers_workerprocess_changelist"))
    browser.save_screenshot(str(shots / "worker-processes.png"))


def drawn_nodes(driver: Any) -> dict[str, tuple[str, str | None]]:
    """Each node the page's DAG picture draws: its state and its box's fill, by name."""
    from selenium.webdriver.common.by import By

    picture = driver.find_element(By.CSS_SELECTOR, "svg.dw-dag")
    assert picture.is_displayed()
    assert picture.size["width"] > 0
    assert picture.size["height"] > 0
    return {
        group.get_attribute("data-node"): (
            group.get_attribute("data-state"),
            group.find_element(By.TAG_NAME, "rect").get_attribute("fill"),
        )
        for group in picture.find_elements(By.CSS_SELECTOR, "g.dw-node")
    }


def test_see_a_workflows_dag_and_cancel_it_from_its_page(
    browser: Any, live_server: Any, worker_processes: WorkerProcesses
) -> None:
    from selenium.webdriver.common.by import By

    shots = artifacts_dir()
    user = User.objects.create_superuser("grace", password=PASSWORD)
    wf = Workflow("nightly-report", Owner.for_user(user))
    fetch = wf.add("fetch", "tests.tasks.wf_value", args=[1]).undo("tests.tasks.noop")
    crunch = wf.add("crunch", "tests.tasks.creep_until_cancelled", args=[0.2]).after(fetch)
    wf.add("publish", "tests.tasks.wf_value", args=[2]).after(crunch)
    wf.add("notify", "tests.tasks.noop").after(fetch, crunch).always()
    workflow_id = wf.submit().id
    worker_processes.start()
    worker_processes.wait_registered(1)

    def now() -> WorkflowInfo:
        return get_workflow_status(workflow_id, System())

    wait_until(lambda: now().node("crunch").state == "running", timeout=20, interval=0.1)
    log_in(browser, live_server, "grace")

    browser.get(live_server.url + reverse("admin:django_workers_workflowrecord_changelist"))
    assert workflow_id in browser.page_source
    browser.save_screenshot(str(shots / "workflow-list.png"))

    browser.get(
        live_server.url
        + reverse("admin:django_workers_workflowrecord_change", args=[quote(workflow_id)])
    )
    expected = {
        "fetch": "completed",
        "crunch": "running",
        "publish": "waiting",
        "notify": "waiting",
    }
    assert drawn_nodes(browser) == {
        name: (state, colours(state)[0]) for name, state in expected.items()
    }
    browser.save_screenshot(str(shots / "workflow-running.png"))

    # A node is a link to its task's page.
    page = browser.current_url
    crunch_task = reverse(
        "admin:django_workers_taskrecord_change", args=[quote(now().node("crunch").task_id)]
    )
    browser.find_element(By.CSS_SELECTOR, 'svg.dw-dag a:has(g[data-node="crunch"])').click()
    wait_until(lambda: browser.current_url.endswith(crunch_task), timeout=10)
    assert "RUNNING" in browser.page_source
    browser.get(page)

    browser.find_element(By.CSS_SELECTOR, "button.dw-cancel").click()
    wait_until(lambda: "was cancelled" in browser.page_source, timeout=10)
    # The cancel shows at once: not "running" while crunch stops and the undo runs.
    state = browser.find_element(By.CSS_SELECTOR, ".dw-summary .dw-state-cell .dw-state").text
    assert state in ("compensating", "compensated")
    # The undo of "fetch" runs on the worker; the page shows the workflow once it is undone.
    wait_until(lambda: now().state == "compensated", timeout=20, interval=0.1)
    browser.refresh()
    assert drawn_nodes(browser)["crunch"][0] == "cancelled"
    undo = browser.find_element(By.CSS_SELECTOR, 'svg.dw-dag g.dw-undo[data-node="fetch"]')
    assert undo.get_attribute("data-state") == "completed"
    assert "compensated" in browser.find_element(By.CSS_SELECTOR, ".dw-summary").text
    browser.save_screenshot(str(shots / "workflow-compensated.png"))
    assert get_task_status(now().node("crunch").task_id, System()).status == TaskStatus.CANCELLED
