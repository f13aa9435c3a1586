"""The site the documentation's code blocks run in: test database, a live worker, the shop.

The docs use the example project's ``shop`` app (``example_project/shop``), so
it is put on ``sys.path``; ``TASKS`` names the django-workers backend as the
docs tell a site to. Everything a page writes is deleted after it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sybil import Example
from sybil.evaluators.python import PythonEvaluator

EXAMPLE_PROJECT = Path(__file__).resolve().parent.parent / "example_project"

#: The TASKS setting docs/django-tasks-backend.md shows.
DOCS_TASKS = {
    "default": {
        "BACKEND": "django_workers.backends.WorkersBackend",
        "QUEUES": ["default", "emails", "reports"],
    }
}

#: The shop is not an installed app of the test settings: its tasks are allowed this way.
DOCS_WORKERS = {"TASK_MODULES": ["shop"]}


def setup_page(namespace: dict[str, Any]) -> None:
    """Give a page the names its view examples take for granted: a logged-in ``request``."""
    from django.contrib.auth.models import User

    namespace["_page_request"] = SimpleNamespace(user=User(pk=42, username="ann"))


class PageEvaluator(PythonEvaluator):
    """Run one block in its page's namespace, where ``request`` is the page's request."""

    def __call__(self, example: Example) -> None:
        # Sybil also puts the fixtures into the namespace, pytest's own "request" among them.
        example.namespace["request"] = example.namespace["_page_request"]
        super().__call__(example)


@pytest.fixture(scope="session")
def docs_database(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The test database, also when only docs run (pytest-django then creates none)."""
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        if "django_workers_taskrecord" in connection.introspection.table_names():
            yield
            return
        created = setup_databases(verbosity=0, interactive=False, aliases={"default": True})
    yield
    with django_db_blocker.unblock():
        teardown_databases(created, verbosity=0)


#: Pages that run their tasks themselves (django_workers.testing): no worker races them.
PAGES_WITHOUT_WORKER = {"testing.md"}


@pytest.fixture(scope="module")
def docs_site(
    request: pytest.FixtureRequest, docs_database: None, django_db_blocker: Any
) -> Iterator[None]:
    """Serve one page: real commits on the test database, a worker runtime on a thread."""
    from django.test import override_settings

    from django_workers.handles import close_listeners
    from django_workers.periodic.declarations import registry
    from django_workers.stores import default_store, reset_default_store
    from tests.helpers import start_runtime

    if str(EXAMPLE_PROJECT) not in sys.path:
        sys.path.insert(0, str(EXAMPLE_PROJECT))
    with (
        django_db_blocker.unblock(),
        override_settings(TASKS=DOCS_TASKS, DJANGO_WORKERS=DOCS_WORKERS),
    ):
        _forget_everything()
        declared_before = registry.all()
        served = None
        if request.path.name not in PAGES_WITHOUT_WORKER:
            served = start_runtime(default_store(), concurrency=4)
        try:
            yield
        finally:
            if served is not None:
                served.stop()
            close_listeners()
            for key in set(registry.all()) - set(declared_before):
                registry.remove(key)  # a page's @periodic schedules end with the page
            _forget_everything()
            reset_default_store()


def _forget_everything() -> None:
    from django_workers.models import (
        ScheduleRecord,
        TaskRecord,
        TaskWatcher,
        WorkerProcess,
        WorkflowRecord,
    )

    ScheduleRecord.objects.all().delete()
    WorkflowRecord.objects.all().delete()
    TaskWatcher.objects.all().delete()
    TaskRecord.objects.all().delete()
    WorkerProcess.objects.all().delete()
