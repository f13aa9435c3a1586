"""The NOTIFY payload format: what the triggers send is what ``parse_notice`` reads."""

from __future__ import annotations

import importlib

import pytest

from django_workers.notices import (
    CANCELLED,
    CHANNEL,
    DONE_CHANNEL,
    ENDED,
    ENQUEUED,
    RECONNECTED,
    Notice,
    parse_notice,
)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ("e:reports", Notice(ENQUEUED, "reports")),
        ("e:a:b", Notice(ENQUEUED, "a:b")),
        ("c:42", Notice(CANCELLED, "42")),
        ("d:42", Notice(ENDED, "42")),
        ("junk", Notice("junk", "")),
    ],
)
def test_parse_notice(payload: str, expected: Notice) -> None:
    notice = parse_notice(payload)
    assert notice == expected
    assert parse_notice(notice.payload) == notice


@pytest.mark.parametrize(
    ("payload", "queues", "wakes"),
    [
        ("e:reports", None, True),
        ("e:reports", {"reports"}, True),
        ("e:reports", {"emails"}, False),
        (RECONNECTED.payload, {"emails"}, True),
        ("c:42", None, False),
        ("d:42", None, False),
    ],
)
def test_is_work_for(payload: str, queues: set[str] | None, wakes: bool) -> None:
    assert parse_notice(payload).is_work_for(queues) is wakes


def test_only_the_listener_reports_a_reconnect() -> None:
    assert parse_notice(RECONNECTED.payload).reconnected
    assert not parse_notice("e:reports").reconnected


def test_the_triggers_send_this_format() -> None:
    sql = importlib.import_module("django_workers.migrations.0002_postgres_notify_triggers").FORWARD
    for channel, kind in [(CHANNEL, ENQUEUED), (CHANNEL, CANCELLED), (DONE_CHANNEL, ENDED)]:
        assert f"pg_notify('{channel}', '{kind}:' ||" in sql
