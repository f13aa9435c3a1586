"""Rows of the hand-written reads and claims as the records and workflows the store returns.

JSON columns are decoded without ``json.loads``'s Python layers where the text
is plain, and SQLite's datetimes are converted as the ORM converts them.
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable, Sequence
from typing import Any, cast

from django.db.backends.base.base import BaseDatabaseWrapper

from django_workers.core import GrantedTaskRow, NodeRow, WorkflowRow
from django_workers.models import WorkflowRecord
from django_workers.references import JSON_SCALARS
from django_workers.stores.sql.columns import _FIELDS, DATETIME_COLUMNS, JSON_COLUMNS

_DATETIME_AT = [i for i, name in enumerate(_FIELDS) if name in DATETIME_COLUMNS]


def _records(
    fetched: Sequence[Sequence[Any]], convert: Callable[[Any], Any] | None = None
) -> list[GrantedTaskRow]:
    """Rows of ``_RECORD_SELECT`` (or ``_RECORD_SELECT_SQLITE``) as records.

    Their watchers go under ``grants``; ``convert``, where the driver's datetimes
    are not what the ORM returns, converts each datetime column.
    """
    records = []
    for values in fetched:
        if convert is not None:
            values = list(values)
            for at in _DATETIME_AT:
                values[at] = convert(values[at])
        record = dict(zip(_FIELDS, values[:-1], strict=True))
        for name in JSON_COLUMNS:
            text = record[name]
            if isinstance(text, str):
                record[name] = _options_value(text) if name == "options" else _json_value(text)
        grants = values[-1]
        if isinstance(grants, str):
            grants = [user_id for _grant, user_id in sorted(json.loads(grants))]
        record["grants"] = list(grants)
        records.append(record)
    # Every column of each record, decoded as the ORM decodes them: task rows. (One cast
    # for the batch: a claim decodes its records on the worker's hot path.)
    return cast(list[GrantedTaskRow], records)


#: The C scanner ``json.loads`` ends in, called directly. An idle worker's wake-up
#: decodes a claimed record's JSON columns: ``json.loads`` also runs three functions of
#: Python and a regular expression, which cost tens of microseconds when their code is no
#: longer in the processor's caches.
_scan_json = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))
#: Options texts decoded already (records of one site hold few distinct ones): flat dicts,
#: of which each record gets its own copy.
_OPTIONS_VALUES: dict[str, dict[str, Any]] = {}
_OPTIONS_VALUES_MAX = 256


def _json_value(text: str) -> Any:
    """``json.loads(text)`` for the JSON text a column holds."""
    # Most records hold empty args, kwargs and errors: no parser needed for those.
    if text == "[]":
        return []
    if text == "{}":
        return {}
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):  # space around it, or not JSON: json.loads says what it is
        return json.loads(text)
    return value


def _options_value(text: str) -> Any:
    """``_json_value`` for an options column: decoded once for each distinct text."""
    known = _OPTIONS_VALUES.get(text)
    if known is not None:
        return known.copy()
    value = _json_value(text)
    if isinstance(value, dict) and all(type(v) in JSON_SCALARS for v in value.values()):
        if len(_OPTIONS_VALUES) >= _OPTIONS_VALUES_MAX:
            _OPTIONS_VALUES.clear()
        _OPTIONS_VALUES[text] = value.copy()
    return value


def _sqlite_datetimes(connection: BaseDatabaseWrapper) -> Callable[[Any], Any] | None:
    """Django's conversion of SQLite's datetime columns, as the ORM makes it; None elsewhere.

    SQLite gives text (or, for a plain column, a naive datetime); with ``USE_TZ`` the ORM
    makes it aware in the connection's time zone.
    """
    if connection.vendor != "sqlite":
        return None
    # SQLite's operations have it; the base class the connection is typed as does not.
    convert = connection.ops.convert_datetimefield_value  # type: ignore[attr-defined]
    return lambda value: convert(value, None, connection)


#: What a workflow's status reads of each of its task records, in this order.
NODE_COLUMNS = ("id", "status", "result", "error", "cancel_reason")
#: The columns of a workflow row, by attribute name.
WORKFLOW_COLUMNS = tuple(f.attname for f in WorkflowRecord._meta.concrete_fields)
_WORKFLOW_JSON = frozenset(
    f.attname for f in WorkflowRecord._meta.concrete_fields if f.get_internal_type() == "JSONField"
)
_WORKFLOW_DATETIMES = frozenset(
    f.attname
    for f in WorkflowRecord._meta.concrete_fields
    if f.get_internal_type() == "DateTimeField"
)


def _workflows(
    fetched: Sequence[Sequence[Any]], convert: Callable[[Any], Any] | None = None
) -> list[tuple[WorkflowRow, list[NodeRow]]]:
    """Rows of a workflow select as (workflow row, its records' ``NODE_COLUMNS``) pairs."""
    found = []
    for values in fetched:
        row = dict(zip(WORKFLOW_COLUMNS, values[:-1], strict=True))
        for name in _WORKFLOW_JSON:
            if isinstance(row[name], str):
                row[name] = json.loads(row[name])
        if convert is not None:  # SQLite's naive datetimes, made aware as the ORM makes them
            for name in _WORKFLOW_DATETIMES:
                row[name] = convert(row[name])
        records = values[-1]
        if isinstance(records, str):
            records = json.loads(records)
        found.append((row, [dict(zip(NODE_COLUMNS, r, strict=True)) for r in records or ()]))
    # Each row's WORKFLOW_COLUMNS and its records' NODE_COLUMNS, decoded.
    return cast(list[tuple[WorkflowRow, list[NodeRow]]], found)
