"""Python values as the texts and parameters the insert statements take.

JSON columns go as the text the submission's check made of them where it still
holds, and a shared options dict is encoded once.
"""

from __future__ import annotations

import json
import operator
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_workers.cancellation import CancelReason
from django_workers.stores.base import NewTask
from django_workers.stores.sql.columns import _FIELDS, DATETIME_COLUMNS, JSON_COLUMNS

_dumps = json.dumps


def _db_value(connection: BaseDatabaseWrapper, name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in JSON_COLUMNS:
        return json.dumps(value)
    if name in DATETIME_COLUMNS:
        return connection.ops.adapt_datetimefield_value(value)
    return value


#: The columns every fresh record holds the same value in (``rows.row_of``), written as
#: literals by ``insert_if_new`` so a submit binds only the columns that vary.
_FRESH_LITERALS = {
    "progress": "0",
    "attempts": "0",
    "result": "NULL",
    "error": "NULL",
    "errors": "'[]'",
    "cancel_reason": f"'{CancelReason.NONE.value}'",
    "worker_id": "NULL",
    "started_at": "NULL",
    "finished_at": "NULL",
}
_BOUND = [f for f in _FIELDS if f not in _FRESH_LITERALS]
_BOUND_DATETIME = frozenset(f for f in _BOUND if f in DATETIME_COLUMNS)

#: The JSON text of the options dicts submits wrote last, by identity: the records built
#: from one ``TaskOptions`` share one dict, which nothing changes.
_SHARED_JSON: dict[int, tuple[Any, str]] = {}
_SHARED_JSON_MAX = 64


def _json_text(value: Any, shared: bool) -> str:
    """``json.dumps(value)``, without encoding an empty list or dict, or a shared dict again."""
    if value == []:
        return "[]"
    if value == {}:
        return "{}"
    if not shared:
        return _dumps(value)
    seen = _SHARED_JSON.get(id(value))
    if seen is not None and seen[0] is value:
        return seen[1]
    text = _dumps(value)
    if len(_SHARED_JSON) >= _SHARED_JSON_MAX:
        _SHARED_JSON.clear()
    # The entry holds the value, so its id cannot be reused while the entry exists.
    _SHARED_JSON[id(value)] = (value, text)
    return text


def _arguments_text(new: NewTask) -> tuple[str, str]:
    """A record's args and kwargs as JSON text: as its check encoded them, while still those."""
    known = new.arguments_json
    if known is not None and known[0] is new.args and known[1] is new.kwargs:
        return known[2], known[3]
    return _json_text(new.args, shared=False), _json_text(new.kwargs, shared=False)


#: A fresh record's ``_BOUND`` values, read off its ``NewTask`` (same names) in one call;
#: where its JSON and datetime values sit among them.
_bound_of = operator.attrgetter(*_BOUND)
_BOUND_ARGS, _BOUND_KWARGS, _BOUND_OPTIONS = (
    _BOUND.index(f) for f in ("args", "kwargs", "options")
)
_BOUND_DATETIME_AT = tuple(i for i, f in enumerate(_BOUND) if f in _BOUND_DATETIME)
