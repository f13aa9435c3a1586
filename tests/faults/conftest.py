"""Fixtures of the fault suite: the private cluster, a fresh database per test, its workers.

The cluster is made once for the package (``initdb``, start, one migrated
template database); each test gets a database copied from that template,
reached in this process through the alias ``faults`` and by its workers
through DATABASE_URL. None of it uses the session's test database: these
tests need no ``django_db`` mark, and unblock database access themselves.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.faults import ON_POSTGRES
from tests.faults.cluster import PrivateCluster, find_bindir
from tests.faults.database import FaultDatabase, add_alias, remove_alias
from tests.faults.invariants import Figures
from tests.faults.workers import FaultWorkers

TEMPLATE = "faults_template"
_FIGURES = pytest.StashKey[list[tuple[str, Figures]]]()
_numbers = itertools.count(1)


@pytest.fixture(scope="package")
def cluster(django_db_blocker: object) -> Iterator[PrivateCluster]:
    """The private cluster, running, with a migrated template database; destroyed after."""
    if not ON_POSTGRES:
        pytest.skip("the fault suite runs on PostgreSQL runs only")
    bindir = find_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL's server programs (initdb, postgres) were not found under "
            "/usr/lib/postgresql/*/bin; install the postgresql package or set WORKERS_PG_BIN"
        )
    private = PrivateCluster(bindir)
    try:
        private.init()
        private.start()
        private.create_database(TEMPLATE)
        add_alias("faults_migrate", private.url(TEMPLATE))
        try:
            with django_db_blocker.unblock():  # type: ignore[attr-defined]
                call_command("migrate", database="faults_migrate", verbosity=0)
        finally:
            remove_alias("faults_migrate")
        yield private
    finally:
        private.destroy()


@pytest.fixture
def faults_db(cluster: PrivateCluster, django_db_blocker: object) -> Iterator[FaultDatabase]:
    """A fresh, migrated database of the running cluster, as the alias ``faults``."""
    if not cluster.running:
        cluster.start()  # a test that failed mid-outage left it stopped
    database = FaultDatabase(cluster, f"faults_{next(_numbers)}")
    cluster.create_database(database.name, template=TEMPLATE)
    add_alias(database.alias, cluster.url(database.name))
    try:
        with django_db_blocker.unblock():  # type: ignore[attr-defined]
            yield database
    finally:
        remove_alias(database.alias)


@pytest.fixture
def fault_workers(faults_db: FaultDatabase, tmp_path: Path) -> Iterator[FaultWorkers]:
    """``runworkers`` subprocesses on ``faults_db``; whatever is left is killed at teardown."""
    workers = FaultWorkers(tmp_path, faults_db.worker_url())
    try:
        yield workers
    finally:
        workers.kill_all()


@pytest.fixture
def report_figures(request: pytest.FixtureRequest) -> Callable[[Figures], None]:
    """Keep a test's figures for the summary printed at the end of the run."""

    def report(figures: Figures) -> None:
        request.config.stash.setdefault(_FIGURES, []).append((request.node.nodeid, figures))

    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    figures = terminalreporter.config.stash.get(_FIGURES, [])
    if not figures:
        return
    terminalreporter.section("fault-suite figures")
    for nodeid, figure in figures:
        terminalreporter.write_line(nodeid.removeprefix("tests/faults/"))
        terminalreporter.write_line(f"    {figure.line()}")
