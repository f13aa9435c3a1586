"""Owner and System, and how task ids encode ownership."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User

from django_workers import (
    AuthorizationError,
    InvalidTaskKey,
    Owner,
    System,
    TaskSubmission,
    cancel_task,
    get_all_tasks,
    get_task_status,
    owner_of,
    scoped_task_key,
    submit_task,
    submit_tasks,
)
from django_workers.authority import OWNER_MAX_LENGTH
from django_workers.stores import WorkerStore
from tests.tasks import add

# -- Owner ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "user_id",
    [
        pytest.param("", id="empty"),
        pytest.param("::", id="separator-only"),
        pytest.param("a::b", id="separator-inside"),
        pytest.param("alice:", id="trailing-colon"),
        pytest.param(":", id="single-colon"),
        pytest.param("x" * (OWNER_MAX_LENGTH + 1), id="too-long"),
        pytest.param("a\nb", id="newline"),
        pytest.param("a\x00b", id="nul"),
        pytest.param("a\tb", id="tab"),
        pytest.param("a\u200bb", id="zero-width-space"),
    ],
)
def test_owner_refuses_a_malformed_id(user_id: str) -> None:
    with pytest.raises(InvalidTaskKey):
        Owner(user_id)


@pytest.mark.parametrize("user_id", [None, 42, b"alice", ["alice"]])
def test_owner_refuses_a_non_string_id(user_id: Any) -> None:
    with pytest.raises(TypeError, match=r"Owner\.for_user"):
        Owner(user_id)


@pytest.mark.parametrize(
    "user_id", ["a", "42", "a:b", ":lead", "x" * OWNER_MAX_LENGTH, "zoë", "a b"]
)
def test_owner_accepts_a_valid_id(user_id: str) -> None:
    assert Owner(user_id).user_id == user_id


@pytest.mark.django_db
def test_owner_for_an_active_user_is_its_primary_key() -> None:
    user = User.objects.create_user("alice")
    assert Owner.for_user(user) == Owner(str(user.pk))


@pytest.mark.django_db
def test_owner_for_an_inactive_user_is_refused() -> None:
    user = User.objects.create_user("bob", is_active=False)
    with pytest.raises(AuthorizationError, match="inactive"):
        Owner.for_user(user)


@pytest.mark.parametrize("user", [AnonymousUser(), None])
def test_owner_for_an_anonymous_user_is_refused(user: Any) -> None:
    with pytest.raises(AuthorizationError, match="anonymous"):
        Owner.for_user(user)


def test_system_is_not_an_owner() -> None:
    assert System() == System()
    assert not isinstance(System(), Owner)


# -- ids ----------------------------------------------------------------------------------

# (user id, key, task id): tricky colons on both sides of the separator.
USER_IDS = [
    ("alice", "report", "alice::report"),
    ("42", "a::b", "42::a::b"),
    ("a:b", "k", "a:b::k"),
    (":lead", "k", ":lead::k"),
    ("x", ":k", "x:::k"),
    ("x", "k:", "x::k:"),
    ("x", "::", "x::::"),
    ("u", "x" * 200, "u::" + "x" * 200),
]


@pytest.mark.parametrize(("user_id", "key", "task_id"), USER_IDS)
def test_scoped_task_key_and_owner_of_are_inverses(user_id: str, key: str, task_id: str) -> None:
    assert scoped_task_key(key, Owner(user_id)) == task_id
    assert owner_of(task_id) == Owner(user_id)
    assert task_id.removeprefix(f"{user_id}::") == key


def test_user_scoped_ids_are_injective_and_disjoint_from_global_ids() -> None:
    users = ["a", "a:b", ":a", "b", "a:a"]
    keys = ["k", ":k", "k:", "a::k", "b::k", "::k"]
    pairs = list(itertools.product(users, keys))
    ids = {scoped_task_key(key, Owner(user)) for user, key in pairs}
    assert len(ids) == len(pairs)
    assert {(owner_of(i).user_id, i.split("::", 1)[1]) for i in ids} == set(pairs)  # type: ignore[union-attr]
    global_ids = {scoped_task_key(key, System(), "global") for key in keys if "::" not in key}
    assert not ids & global_ids
    assert all(owner_of(i) is None for i in global_ids)


@pytest.mark.parametrize("authority", [System(), Owner("alice")])
def test_a_global_id_is_the_key_verbatim(authority: Owner | System) -> None:
    assert scoped_task_key("nightly:report", authority, "global") == "nightly:report"
    assert owner_of("nightly:report") is None


@pytest.mark.parametrize("authority", [System(), Owner("alice")])
def test_a_global_key_with_the_separator_is_refused(authority: Owner | System) -> None:
    with pytest.raises(InvalidTaskKey, match="::"):
        scoped_task_key("a::b", authority, "global")


def test_system_cannot_use_the_user_scope() -> None:
    with pytest.raises(InvalidTaskKey, match="scope='global'"):
        scoped_task_key("k", System())


def test_an_unknown_scope_is_refused() -> None:
    with pytest.raises(InvalidTaskKey, match="scope"):
        scoped_task_key("k", Owner("alice"), "team")  # type: ignore[arg-type]


# -- the authority argument of every API call ------------------------------------------------

API_CALLS: dict[str, Callable[[WorkerStore, Any, str], object]] = {
    "submit_task": lambda store, auth, _id: submit_task("new", add, auth, args=[1, 2], store=store),
    "submit_tasks": lambda store, auth, _id: submit_tasks(
        [TaskSubmission(key="new", task=add, args=[1, 2])], auth, store=store
    ),
    "submit_tasks-empty": lambda store, auth, _id: submit_tasks([], auth, store=store),
    "get_task_status": lambda store, auth, task_id: get_task_status(task_id, auth, store=store),
    "get_all_tasks": lambda store, auth, _id: get_all_tasks(auth, store=store),
    "cancel_task": lambda store, auth, task_id: cancel_task(task_id, auth, store=store),
}


@pytest.mark.parametrize("call", API_CALLS.values(), ids=API_CALLS.keys())
@pytest.mark.parametrize("authority", ["alice", "alice::x", None, 42, AnonymousUser()])
def test_every_api_call_refuses_a_bare_authority(
    store: WorkerStore, call: Callable[[WorkerStore, Any, str], object], authority: Any
) -> None:
    task_id = submit_task("existing", add, Owner("alice"), args=[1, 2], store=store)
    with pytest.raises(TypeError, match="Owner"):
        call(store, authority, task_id)
    [only] = store.list_tasks(user_id=None)
    assert only.id == task_id
    assert only.status == "PENDING"


@pytest.mark.parametrize(
    "fn", [submit_task, submit_tasks, get_task_status, get_all_tasks, cancel_task, scoped_task_key]
)
def test_no_api_call_has_a_default_authority(fn: Callable[..., object]) -> None:
    assert inspect.signature(fn).parameters["authority"].default is inspect.Parameter.empty


def test_scoped_task_key_refuses_a_bare_authority() -> None:
    with pytest.raises(TypeError, match="Owner"):
        scoped_task_key("k", "alice")  # type: ignore[arg-type]
