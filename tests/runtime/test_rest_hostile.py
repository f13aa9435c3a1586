"""Hostile requests to the REST API: each answers its documented 400 or 404, and writes nothing.

Ids at and past every width (the id's 255 characters, the owner's 53, the key's
200, in one-, two- and four-byte characters), ``::`` in every place,
percent-encoded control characters and slashes in paths, huge query values,
and offsets and limits that are not integers.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from django_workers import Owner, System, get_task_status, submit_task
from django_workers.authority import KEY_MAX_LENGTH, OWNER_MAX_LENGTH, TASK_ID_MAX_LENGTH
from django_workers.models import TaskRecord, WorkflowRecord
from django_workers.rest.views import CANCEL_SUFFIX
from django_workers.workflows import Workflow
from tests.helpers import client_for
from tests.tasks import add

pytestmark = pytest.mark.django_db

TASKS, WORKFLOWS = "/workers/tasks/", "/workers/workflows/"
#: The longest id the GET of a cancel path takes: it reads "{id}/actions/cancel".
CANCEL_PATH_WIDTH = TASK_ID_MAX_LENGTH - len(CANCEL_SUFFIX)
E_ACUTE, GRINNING = "%C3%A9", "%F0%9F%98%80"  # two and four bytes in UTF-8, one character
#: The caller, whose task and workflow "e" must come through every request untouched.
ME = 4201
OWNER = "u" * OWNER_MAX_LENGTH

MISSING = {"status": 404, "error": "not_found"}
BAD_ID = {"status": 400, "error": "invalid_key"}
BAD_QUERY = {"status": 400, "error": "invalid_options"}


#: A GET of a cancel path that names no task the caller may read: it never cancels.
NOT_A_CANCEL = {"status": 405, "error": "method_not_allowed"}


def row(what: str, task_id: str, answer: Any, *marks: Any) -> Any:
    """An id as it goes in the path, and the answer of the id routes."""
    return pytest.param(task_id, answer, id=what, marks=marks)


IDS = [
    row("id at its width", "x" * TASK_ID_MAX_LENGTH, MISSING),
    row("id past its width", "x" * (TASK_ID_MAX_LENGTH + 1), BAD_ID),
    row("cancel path id at its width", "x" * CANCEL_PATH_WIDTH, MISSING),
    row("cancel path id past its width", "x" * (CANCEL_PATH_WIDTH + 1), MISSING),
    row("owner and key at their widths", f"{OWNER}::{'k' * KEY_MAX_LENGTH}", MISSING),
    row("owner past its width", f"{'u' * (OWNER_MAX_LENGTH + 1)}::{'k' * 10}", MISSING),
    row("key past its width", f"1::{'k' * (KEY_MAX_LENGTH + 1)}", MISSING),
    row("two-byte id at its width", E_ACUTE * TASK_ID_MAX_LENGTH, MISSING),
    row("two-byte id past its width", E_ACUTE * (TASK_ID_MAX_LENGTH + 1), BAD_ID),
    row("four-byte id at its width", GRINNING * TASK_ID_MAX_LENGTH, MISSING),
    row("four-byte id past its width", GRINNING * (TASK_ID_MAX_LENGTH + 1), BAD_ID),
    row("separator alone", "::", MISSING),
    row("separator encoded", "%3A%3A", MISSING),
    row("no owner", "::x", MISSING),
    row("no key", "1::", MISSING),
    row("three colons", "1:::x", MISSING),
    row("separator twice", "1::x::y", MISSING),
    row("owner ending in a colon", "1:::", MISSING),
    row("NUL", "1::a%00b", BAD_ID),
    row("newline", "1::a%0Ab", BAD_ID),
    row("carriage return", "1::a%0Db", BAD_ID),
    row("tab", "1::a%09b", BAD_ID),
    row("unit separator", "1::a%1Fb", BAD_ID),
    row("delete", "1::a%7Fb", BAD_ID),
    row("C1 next line", "1::a%C2%85b", BAD_ID),
    row("zero-width space", "1::a%E2%80%8Bb", BAD_ID),
    row("line separator", "1::a%E2%80%A8b", BAD_ID),
    row("byte order mark", "%EF%BB%BF1::a", BAD_ID),
    row("encoded slash", "1::a%2Fb", MISSING),
    row("encoded double slash", "1::a%2F%2Fb", MISSING),
    row("encoded slash alone", "%2F", MISSING),
    row("dot-dot", "..", MISSING),
    row("encoded dot-dot", "%2E%2E", MISSING),
    row("lone percent", "%", MISSING),
    row("bad percent escape", "%zz", MISSING),
    row("bytes that are not UTF-8", "1::%FF%FE", MISSING),
    row("a real id and a NUL", f"{ME}::e%00", BAD_ID),
    row("a real id and a newline", f"{ME}::e%0A", BAD_ID),
    row("a real id and a slash", f"{ME}::e%2F", MISSING),
    row("a real id and a space", f"{ME}::e%20", MISSING),
    row("a real id upper-cased", f"{ME}::E", MISSING),
    row("a real id accented", f"{ME}::{E_ACUTE}", MISSING),
    row("a real workflow key and a NUL", "e%00", BAD_ID),
    row("a real workflow key upper-cased", "E", MISSING),
]


def refused(response: Any, answer: dict[str, Any]) -> None:
    assert (response.status_code, response.json()["error"]) == (answer["status"], answer["error"])


@pytest.fixture
def me() -> User:
    return User.objects.create_user("me", id=ME)


@pytest.fixture
def written(me: User) -> Any:
    """The caller's pending task and running workflow; a function that reads every row back."""
    owner = Owner.for_user(me)
    submit_task("e", add, owner, args=(1, 2))
    submit_task("system", add, System(), args=(1, 2), scope="global")
    flow = Workflow("e", owner)
    flow.add("a", add, args=[1, 2])
    flow.submit()

    def rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        tasks = TaskRecord.objects.order_by("id").values_list("id", "status", "cancel_reason")
        flows = WorkflowRecord.objects.order_by("id").values_list("id", "state")
        return list(tasks), list(flows)

    return rows


@pytest.mark.parametrize(("task_id", "answer"), IDS)
def test_a_hostile_id_answers_400_or_404_on_every_route_and_writes_nothing(
    task_id, answer, me, written
):
    before = written()
    client = client_for(me)
    refused(client.get(f"{TASKS}{task_id}/"), answer)
    refused(client.patch(f"{TASKS}{task_id}/actions/cancel/"), answer)
    refused(client.get(f"{TASKS}{task_id}/actions/cancel/"), NOT_A_CANCEL)
    refused(client.get(f"{WORKFLOWS}{task_id}/"), answer)
    refused(client.patch(f"{WORKFLOWS}{task_id}/actions/cancel/"), answer)
    refused(client.patch(f"{WORKFLOWS}{task_id}/actions/cancel/?undo=false"), answer)
    assert written() == before


@pytest.mark.parametrize("width", [KEY_MAX_LENGTH - 1, KEY_MAX_LENGTH])
def test_a_task_whose_key_is_at_its_width_is_read_and_cancelled(width, me):
    task_id = submit_task("k" * width, add, Owner.for_user(me), args=(1, 2))
    client = client_for(me)
    assert client.get(f"{TASKS}{task_id}/").json()["id"] == task_id
    assert client.patch(f"{TASKS}{task_id}/actions/cancel/").json()["status"] == "CANCELLED"
    assert get_task_status(task_id, System()).status == "CANCELLED"


HUGE = 100_000
#: Offsets and limits that are not integers written in digits; Python's int() reads some.
NOT_INTEGERS = ("one", "1.5", "1e3", "0x10", "NaN", "inf", "1,000", "1_000", " 7", "7 ", "+7", "٣")

#: (what, list route, query, answer)
QUERIES = [
    ("queue at its width", TASKS, {"queue": "q" * 100}, 200),
    ("queue past its width", TASKS, {"queue": "q" * 101}, BAD_QUERY),
    ("huge queue", TASKS, {"queue": "q" * HUGE}, BAD_QUERY),
    ("huge status", TASKS, {"status": "S" * HUGE}, BAD_QUERY),
    ("huge state", WORKFLOWS, {"state": "s" * HUGE}, BAD_QUERY),
    ("huge offset", TASKS, {"offset": "9" * 5000}, BAD_QUERY),
    ("huge limit", WORKFLOWS, {"limit": "1" * 5000}, BAD_QUERY),
    ("offset past int64", WORKFLOWS, {"offset": str(2**63)}, BAD_QUERY),
    *[
        (f"{route.split('/')[-2]} {name} {value!r}", route, {name: value}, BAD_QUERY)
        for route in (TASKS, WORKFLOWS)
        for name in ("offset", "limit")
        for value in NOT_INTEGERS
    ],
    ("offset written as a float", TASKS, {"offset": "3.0"}, 200),
    ("empty limit", WORKFLOWS, {"limit": ""}, 200),
]


@pytest.mark.parametrize(("what", "route", "query", "answer"), QUERIES, ids=[q[0] for q in QUERIES])
def test_a_hostile_query_answers_as_documented_and_writes_nothing(
    what, route, query, answer, me, written
):
    before = written()
    response = client_for(me).get(route, query)
    if answer == 200:
        assert response.status_code == 200
    else:
        refused(response, answer)
        assert next(iter(query)) in response.json()["detail"]
    assert written() == before


@pytest.mark.parametrize("undo", ["x" * HUGE, "true", "2", "None", "[]"])
def test_a_hostile_undo_is_refused_and_cancels_nothing(undo, me, written):
    before = written()
    response = client_for(me).patch(f"{WORKFLOWS}e/actions/cancel/?undo={undo}")
    refused(response, BAD_QUERY)
    assert written() == before
