"""A task's JSON values: what reads back, how many bytes the stored JSON takes, how a
record's JSON columns read back, and the text a batch's COPY writes them (and its times) as."""

from __future__ import annotations

import datetime as dt
import enum
import json
from typing import Any

import pytest
from django.core.serializers.json import DjangoJSONEncoder

from django_workers.exceptions import ArgumentsNotSerializable
from django_workers.references import ids_and_names_json, to_json_text, to_sized_json
from django_workers.stores.rows import options_of
from django_workers.stores.sql import copy, decode
from tests.factories import NewTaskFactory


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
        [1, -0.0, 1e16, True, None, "naïve ☃", "\U0001f600 a pair in JSON"],
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


@pytest.mark.parametrize(
    "value",
    [["\ud800"], {"k": "a\udfff"}, {"\udc80": 1}, [[{"deep": ["\ud83d"]}]], "\ud800"],
)
def test_a_lone_surrogate_is_refused_anywhere(value: Any) -> None:
    with pytest.raises(ArgumentsNotSerializable, match="lone surrogate"):
        to_json_text(value, "Task args")


@pytest.mark.parametrize("value", [["\\ud800"], ["\U0001f600"], {"k": "\\udfff \u00e9"}])
def test_what_only_looks_like_a_surrogate_in_json_is_kept(value: Any) -> None:
    assert to_json_text(value, "Task args")[0] == value


def test_data_nested_too_deeply_is_refused_as_not_serializable() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ArgumentsNotSerializable, match="nested too deeply"):
        to_json_text(deep, "Task args")


@pytest.mark.parametrize(
    "value",
    [
        ["a", 1],
        (7, "naïve ☃", -3),
        ['quote " and back\\slash', "\n\t\u2028"],
        [0, 10**20, "日本"],
    ],
)
def test_ids_and_names_are_written_as_the_encoder_writes_them(value: Any) -> None:
    assert ids_and_names_json(value) == to_json_text(list(value), "Task args")[1]


@pytest.mark.parametrize(
    "value",
    [
        [True],  # a bool is an int, but its JSON is not str(True)
        [1.5],
        [Level.HIGH, Tag("x")],  # subclasses may encode otherwise
        [None],
        [[1]],
        ["a\x00b"],  # the encoder's check says what is wrong
        ["\\u0000"],  # reads like an escaped NUL: the encoder's check looks closer
        [10**5000],  # too long for str(): the encoder's check says so
        ["\ud800"],  # a lone surrogate: the encoder's check refuses it
        ["\U0001f600"],  # a pair in JSON, like a lone one at a glance: the check looks closer
    ],
)
def test_anything_else_is_left_to_the_encoder(value: Any) -> None:
    assert ids_and_names_json(value) is None


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "{}",
        '["/tmp/x", "5"]',
        '{"a": {"b": [null, 1.5, true]}, "c": "\\u00e9"}',
        "null",
        "12",
        " [1] ",
    ],
)
def test_a_columns_json_reads_as_json_loads_reads_it(text: str) -> None:
    assert decode._json_value(text) == json.loads(text)


def test_a_columns_invalid_json_raises_as_json_loads_does() -> None:
    for text in ("[1,", '{"a": 1} x', ""):
        with pytest.raises(json.JSONDecodeError):
            decode._json_value(text)


def test_decoded_options_are_shared_by_text_but_each_record_gets_its_own() -> None:
    text = '{"retries": 2, "timeout": 1.0}'
    first, second = decode._options_value(text), decode._options_value(text)
    assert first == second == {"retries": 2, "timeout": 1.0}
    first["retries"] = 99
    assert decode._options_value(text)["retries"] == 2


def test_options_equal_in_python_but_not_in_type_are_not_mixed_up() -> None:
    assert options_of({"timeout": 1}).timeout == 1
    assert type(options_of({"timeout": 1.0}).timeout) is float
    assert options_of({"retry_jitter": False}).retry_jitter is False
    # 0 == False, but 0 is no stored jitter: it reads as the default, not as False.
    assert options_of({"retry_jitter": 0}).retry_jitter is True


@pytest.mark.parametrize(
    "times",
    [
        # Across a second, and from microsecond 0 (which isoformat() leaves out).
        [
            dt.datetime(2026, 12, 7, 5, 3, 12, 999_999, tzinfo=dt.UTC),
            dt.datetime(2026, 12, 7, 5, 3, 13, tzinfo=dt.UTC),
        ],
        # The same instant in another zone is another text; naive times (USE_TZ off) too.
        [
            dt.datetime(2026, 12, 7, 5, 3, 12, 5, tzinfo=dt.UTC),
            dt.datetime(
                2026, 12, 7, 10, 33, 12, 6, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))
            ),
            dt.datetime(2026, 12, 7, 5, 3, 12, 7),
        ],
    ],
)
def test_a_copy_lines_creation_time_reads_back_as_the_record_holds_it(times: list[Any]) -> None:
    news = [NewTaskFactory(created_at=at) for at in times]
    read = [dt.datetime.fromisoformat(line.split("\t")[3]) for line in copy._copy_lines(news)]
    assert read == times
    assert [r.tzinfo for r in read] == [t.tzinfo for t in times]
