"""Fresh task records as PostgreSQL's COPY text format, streamed through psycopg."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from enum import Enum
from typing import Any

from django_workers.stores.base import NewTask
from django_workers.stores.rows import FRESH_VALUES
from django_workers.stores.sql.columns import _COLUMNS, _FIELDS, _target
from django_workers.stores.sql.encode import _BOUND, _FRESH_LITERALS, _arguments_text, _json_text


def _copy_lines(news: Iterable[NewTask]) -> Iterator[str]:
    """Fresh records as lines of COPY's text format, their columns in ``_COPY_FIELDS`` order.

    Each line is the record's own values, then a text made once for the values the
    records of one shape share (``build_tasks`` gives them the same objects), then the
    values every fresh record holds: past the first record of a shape, a line is six
    values and a join, where psycopg's ``write_row`` converted all 25 columns a row.
    """
    shared: tuple[Any, ...] | None = None
    shared_text = ""
    second: datetime | None = None
    head = tail = ""
    for new in news:
        # Equal values make equal texts, so a tuple compare (identity first) decides.
        values = _shared_of(new)
        if values != shared:
            shared = values
            shared_text = "\t".join(map(_copy_text, values))
        args, kwargs = _arguments_text(new)
        # A batch's times are a microsecond apart: its second's text is made once, then
        # each line writes its microseconds (an aware isoformat() was a tenth of a line).
        created_at = new.created_at
        whole = created_at.replace(microsecond=0)
        if whole != second or whole.tzinfo is not second.tzinfo:
            second = whole
            text = whole.isoformat()
            head, tail = text[:19], text[19:]
        task_id = _cell(new.id)
        key = task_id if new.key is new.id else _cell(new.key)  # a global key is its id
        yield (
            f"{task_id}\t{key}\t{_cell(new.run_id)}\t"
            f"{head}.{created_at.microsecond:06d}{tail}\t"
            f"{args if args == '[]' else _cell(args)}\t"
            f"{kwargs if kwargs == '{}' else _cell(kwargs)}\t"
            f"{shared_text}\t{_COPY_FRESH_TEXT}\n"
        )


#: What COPY's text format escapes in a value: the backslash, the column and row ends.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _cell(text: str) -> str:
    """``text`` as a value of COPY's text format."""
    # A printable text holds no tab, newline or carriage return: most need nothing.
    if "\\" in text or not text.isprintable():
        return text.translate(_COPY_ESCAPES)
    return text


def _copy_text(value: Any) -> str:
    """A column value as COPY's text format reads it: JSON columns' values as JSON."""
    if value is None:
        return "\\N"
    if isinstance(value, list | dict):
        return _cell(_json_text(value, shared=True))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        value = value.value
    return _cell(str(value))


@functools.cache
def _copy_statement(vendor: str, quote: Callable[[str], str]) -> str:
    """The COPY of fresh records, its columns in ``_COPY_FIELDS`` order (built once)."""
    table = _target(vendor, quote)[0]
    return f"COPY {table} ({', '.join(quote(c) for c in _COPY_COLUMNS)}) FROM STDIN"


#: Lines a COPY sends at once: the first few soon, so the server starts writing while
#: the rest are built, then more a message.
_COPY_FIRST_LINES, _COPY_LINES = 32, 128


def _write_lines(copy: Any, lines: Iterable[str]) -> None:
    """Send ``lines`` through a psycopg ``Copy``, a chunk of them a message."""
    chunk: list[str] = []
    size = _COPY_FIRST_LINES
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            copy.write("".join(chunk))
            chunk = []
            size = _COPY_LINES
    if chunk:
        copy.write("".join(chunk))


#: A COPY names first the columns each record holds alone, then those the records of one
#: shape share, then those every fresh record holds alike (see ``_copy_lines``).
_OWN_FIELDS = ("id", "key", "run_id", "created_at", "args", "kwargs")
_SHARED_FIELDS = tuple(f for f in _BOUND if f not in _OWN_FIELDS)
_COPY_FIELDS = [*_OWN_FIELDS, *_SHARED_FIELDS, *_FRESH_LITERALS]
_COPY_COLUMNS = [_COLUMNS[_FIELDS.index(f)] for f in _COPY_FIELDS]
_shared_of = operator.attrgetter(*_SHARED_FIELDS)

#: The values every fresh record holds, as the end of each line ``_copy_lines`` makes.
_COPY_FRESH_TEXT = "\t".join(_copy_text(FRESH_VALUES[f]) for f in _FRESH_LITERALS)
