"""A task's JSON values: what reads back, and how many bytes the stored JSON takes."""

from __future__ import annotations

import datetime as dt
import enum
import json
from typing import Any

import pytest
from django.core.serializers.json import DjangoJSONEncoder

from django_workers.exceptions import ArgumentsNotSerializable
from django_workers.references import to_json_text, to_sized_json


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


class Level(enum.IntEnum):
    HIGH = 2


class Tag(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        [1, -0.0, 1e16, True, None, "naïve ☃", "\ud800"],
        {"a": 1, "b": None, "c": False},
        {1: "an int key reads back as a string"},
        [Level.HIGH, Tag("x")],
        [dt.date(2026, 12, 2)],
        [[1], {"nested": True}],
    ],
)
def test_what_reads_back_is_what_json_gives_and_never_the_same_object(value: Any) -> None:
    loaded, text = to_json_text(value, "The value")
    assert text == json.dumps(value, cls=DjangoJSONEncoder)
    assert loaded == json.loads(text)
    assert [type(v) for v in _values(loaded)] == [type(v) for v in _values(json.loads(text))]
    assert loaded is not value


def _values(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else list(value)


@pytest.mark.parametrize("value", [["a\x00b"], {"k": "\x00"}])
def test_a_nul_is_refused_in_flat_values_too(value: Any) -> None:
    with pytest.raises(ArgumentsNotSerializable, match="NUL"):
        to_json_text(value, "Task args")
