"""Fixtures: every store, the settings that select them, and fresh defaults per test."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from django_workers.conf import workers_settings
from django_workers.stores import WorkerStore, reset_default_store
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.stores.memory import InMemoryWorkerStore
from tests import tasks
from tests.helpers import WorkerProcesses

STORES = ["memory", pytest.param("database", marks=pytest.mark.django_db)]
TX_STORES = ["memory", pytest.param("database", marks=pytest.mark.django_db(transaction=True))]


@pytest.fixture(autouse=True)
def _fresh_defaults() -> Iterator[None]:
    workers_settings.reload()
    reset_default_store()
    yield
    workers_settings.reload()
    reset_default_store()


def _make_store(kind: str) -> WorkerStore:
    return InMemoryWorkerStore() if kind == "memory" else DatabaseWorkerStore()


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> WorkerStore:
    """Each store in turn; the database one inside the test's transaction."""
    return _make_store(request.param)


@pytest.fixture(params=TX_STORES)
def tx_store(request: pytest.FixtureRequest) -> WorkerStore:
    """Each store in turn; the database one committing for real (threads, processes)."""
    return _make_store(request.param)


@pytest.fixture
def db_store(transactional_db: None) -> DatabaseWorkerStore:
    """The database store, committing for real."""
    return DatabaseWorkerStore()


@pytest.fixture
def worker_processes(transactional_db: None, tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Start ``runworkers`` subprocesses on the test database; all are killed at teardown."""
    processes = WorkerProcesses(tmp_path)
    yield processes
    processes.kill_all()


@pytest.fixture
def coordination() -> Iterator[None]:
    """Fresh coordination state of ``tests.tasks`` (gates, counters) around the test."""
    tasks.reset_coordination()
    yield
    tasks.reset_coordination()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A name unique to this test, for the coordination state of ``tests.tasks``."""
    return request.node.nodeid


@pytest.fixture(scope="session")
def hooks() -> ModuleType:
    """scripts/docs_hooks.py, the documentation site's build hooks, as a module."""
    path = Path(__file__).resolve().parent.parent / "scripts" / "docs_hooks.py"
    spec = importlib.util.spec_from_file_location("docs_hooks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
