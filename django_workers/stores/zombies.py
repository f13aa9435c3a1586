"""The zombie sweep's ends, row by row: one record that cannot be ended stops no other.

A record whose end cannot be built from its columns, or whose end the
database refuses, is told to ``refused`` and left as it is; the sweep goes
on with the others, and the next sweep tries it again. A database that
cannot be reached is no refusal: that error goes to the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import InterfaceError, OperationalError

from django_workers import lifecycle
from django_workers.lifecycle import TaskEnd

logger = logging.getLogger(__name__)

#: Told of a record the sweep could not end: its task id, and why.
Refused = Callable[[str, Exception], None]

#: Errors that say the database cannot be reached now, not that it refuses a record.
UNREACHABLE = (OperationalError, InterfaceError)


def log_refused(task_id: str, error: Exception) -> None:
    """The default ``Refused``: one error line."""
    logger.error(
        "The zombie sweep could not end task %s (%r); it goes on with the others", task_id, error
    )


def zombie_ends(
    found: Iterable[Mapping[str, Any]], finished_at: datetime, refused: Refused
) -> list[TaskEnd]:
    """The sweep's end of each record (its columns in a row); a row that has none is refused."""
    ends = []
    for row in found:
        try:
            ends.append(lifecycle.zombie_end(row, finished_at))
        except Exception as e:  # a row no end can be made of: the others still are
            refused(str(row.get("id")), e)
    return ends


def end_each(
    end_tasks: Callable[[Sequence[TaskEnd]], list[bool]],
    ends: Sequence[TaskEnd],
    refused: Refused,
) -> list[bool]:
    """Write each end alone with ``end_tasks``; a refused one is told and counts as lost."""
    won = []
    for end in ends:
        try:
            won.append(end_tasks([end])[0])
        except UNREACHABLE:
            raise
        except Exception as e:  # this record's end alone; the others are still written
            refused(end.task_id, e)
            won.append(False)
    return won
