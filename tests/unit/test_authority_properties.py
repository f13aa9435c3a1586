"""Properties of task ids: (user, key) -> id is injective, owner_of inverts it, scopes are apart.

Ids and keys are drawn with many colons, since ``::`` is the separator and a
colon at either side of it is where two (user, key) pairs could meet.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_workers.authority import (
    KEY_MAX_LENGTH,
    OWNER_MAX_LENGTH,
    SEPARATOR,
    Owner,
    System,
    owner_of,
    scoped_task_key,
    validate_key,
)
from django_workers.exceptions import InvalidTaskKey

PROPERTIES = settings(max_examples=150, derandomize=True, database=None, deadline=None)

#: Python's printable characters: no Unicode "Other" or "Separator", but the ASCII space.
printable = st.one_of(st.just(" "), st.characters(categories=("L", "M", "N", "P", "S")))
not_colon = printable.filter(lambda char: char != ":")
#: A lone colon before a character that is not one: never '::', never a trailing ':'.
lone_colon = not_colon.map(lambda char: f":{char}")
#: Pieces that make ids meet at the separator.
colons = st.sampled_from([":", "::", ":::"])

no_separator = st.one_of(not_colon, lone_colon)

user_ids = st.lists(no_separator, min_size=1, max_size=OWNER_MAX_LENGTH // 2).map("".join)
keys = st.lists(st.one_of(printable, colons), min_size=1, max_size=KEY_MAX_LENGTH // 3).map("".join)
global_keys = st.tuples(
    st.lists(no_separator, min_size=1, max_size=50).map("".join),
    st.sampled_from(["", ":"]),
).map("".join)


def strings(max_size: int) -> st.SearchStrategy[str]:
    """Any strings, colons and non-printable characters often among them."""
    pieces = st.one_of(colons, printable, st.characters(codec="utf-8"))
    return st.lists(pieces, max_size=max_size).map("".join)


def accepts(check: Callable[[str], object], value: str) -> bool:
    try:
        check(value)
    except InvalidTaskKey:
        return False
    return True


def user_id(user: str, key: str) -> str:
    return scoped_task_key(key, Owner(user))


@PROPERTIES
@given(strings(OWNER_MAX_LENGTH + 4))
def test_owner_accepts_exactly_the_documented_ids(value: str) -> None:
    documented = (
        1 <= len(value) <= OWNER_MAX_LENGTH
        and SEPARATOR not in value
        and not value.endswith(":")
        and value.isprintable()
    )
    assert accepts(Owner, value) == documented


@PROPERTIES
@given(user_ids, keys, user_ids, keys)
def test_two_user_scoped_ids_are_equal_only_for_the_same_user_and_key(
    u1: str, k1: str, u2: str, k2: str
) -> None:
    assert (user_id(u1, k1) == user_id(u2, k2)) == ((u1, k1) == (u2, k2))


@PROPERTIES
@given(user_ids, keys)
def test_every_other_reading_of_a_user_scoped_id_is_invalid(user: str, key: str) -> None:
    # Each '::' in the id is a place another (user, key) pair could claim it.
    task_id = user_id(user, key)
    for at in range(len(task_id) - 1):
        if task_id.startswith(SEPARATOR, at):
            other_user, other_key = task_id[:at], task_id[at + len(SEPARATOR) :]
            if accepts(Owner, other_user) and accepts(validate_key, other_key):
                assert (other_user, other_key) == (user, key)
                assert user_id(other_user, other_key) == task_id


@PROPERTIES
@given(user_ids, keys)
def test_owner_of_inverts_the_user_scope(user: str, key: str) -> None:
    assert owner_of(user_id(user, key)) == Owner(user)


@PROPERTIES
@given(global_keys, st.one_of(st.just(None), user_ids), user_ids, keys)
def test_a_global_id_has_no_owner_and_is_no_user_scoped_id(
    key: str, submitter: str | None, user: str, other_key: str
) -> None:
    authority = System() if submitter is None else Owner(submitter)
    global_id = scoped_task_key(key, authority, "global")
    assert global_id == key
    assert owner_of(global_id) is None
    assert global_id != user_id(user, other_key)
    assert global_id != user_id(user, key)


@PROPERTIES
@given(keys)
def test_only_keys_without_the_separator_are_global(key: str) -> None:
    if SEPARATOR in key:
        with pytest.raises(InvalidTaskKey, match="reserved for user-scoped ids"):
            scoped_task_key(key, System(), "global")
    else:
        assert scoped_task_key(key, System(), "global") == key
