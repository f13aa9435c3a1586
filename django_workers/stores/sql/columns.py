"""The task table's columns as the hand-written statements name and order them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import cast

from django_workers.models import TaskRecord

JSON_COLUMNS = frozenset({"args", "kwargs", "options", "result", "error", "errors"})
DATETIME_COLUMNS = frozenset({"run_after", "created_at", "started_at", "finished_at"})

_FIELDS = [f.attname for f in TaskRecord._meta.concrete_fields]
# A concrete field is one with a column, so none of these is None.
_COLUMNS = [cast(str, f.column) for f in TaskRecord._meta.concrete_fields]


@functools.cache
def _target(vendor: str, quote: Callable[[str], str]) -> tuple[str, str]:
    """The quoted table and column list of an insert (built once per database vendor)."""
    return quote(TaskRecord._meta.db_table), ", ".join(quote(c) for c in _COLUMNS)
