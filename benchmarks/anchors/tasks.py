"""The no-op and probe tasks, for django-tasks-db (a django.tasks task) and for Procrastinate.

Procrastinate's Django app imports the ``tasks`` module of each installed app,
which registers ``pc_noop`` and ``pc_probe``.
"""

from __future__ import annotations

from django.tasks import task
from procrastinate.contrib.django import app

from benchmarks.common import record_start


@task
def dt_noop() -> None:
    """django-tasks-db: do nothing."""


@task
def dt_probe(path: str, tag: str) -> None:
    """django-tasks-db: record when this run began."""
    record_start(path, tag)


@app.task(name="pc_noop")
def pc_noop() -> None:
    """Procrastinate: do nothing."""


@app.task(name="pc_probe")
def pc_probe(path: str, tag: str) -> None:
    """Procrastinate: record when this job began."""
    record_start(path, tag)
