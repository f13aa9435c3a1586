"""Module-level fixture tasks the tests submit and workers run."""

from __future__ import annotations

from django.tasks import task


def add(a: int, b: int) -> int:
    return a + b


def noop() -> None:
    return None


@task
def django_add(a: int, b: int) -> int:
    return a + b
