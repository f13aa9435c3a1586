"""A task's JSON values: what reads back, and how many bytes the stored JSON takes."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.core.serializers.json import DjangoJSONEncoder

from django_workers.references import to_sized_json


@pytest.mark.parametrize(
    "value",
    [
        None,
        0,
        2.5,
        True,
        "",
        "naïve ☃",
        [],
        {},
        [1, None, "x"],
        {"a": {"b": [None]}},
        dt.date(2026, 12, 2),
        ("tuple", 1),
    ],
)
def test_the_size_is_the_stored_jsons_utf8_bytes(value: Any) -> None:
    loaded, size = to_sized_json(value, "The value")
    stored = json.dumps(value, cls=DjangoJSONEncoder)
    assert loaded == json.loads(stored)
    assert size == len(stored.encode())
    # The size of what reads back is the same: the store measures results after the round trip.
    assert size == len(json.dumps(loaded).encode())
