"""Workflow rows live in ``django_workers.engine.records``; runtime/run.py imports one name here."""

from django_workers.engine.records import UNDO_SUFFIX

__all__ = ["UNDO_SUFFIX"]
