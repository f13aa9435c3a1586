"""The benchmark's tasks for django-workers: module-level functions, as users write them."""

from __future__ import annotations

from benchmarks.common import record_start


def noop() -> None:
    """Do nothing: the drain and enqueue figures measure the queue, not the work."""


def probe(path: str, tag: str) -> None:
    """Record when this run began (the latency figure: enqueue -> start)."""
    record_start(path, tag)
