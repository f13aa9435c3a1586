"""Ids are compared exactly in the database: case, accents and trailing spaces tell them apart.

(user, key) -> id is injective as strings (tests/unit/test_authority_properties.py);
these check that the database keeps it so. On MariaDB and MySQL that takes a
binary collation of those columns (migration 0015): their default one compares
text without case, accents or trailing spaces.
"""

from __future__ import annotations

import pytest

from django_workers import Owner, get_all_tasks, get_task_status, submit_task
from django_workers.workflows import Workflow, get_all_workflows
from tests.tasks import add

pytestmark = pytest.mark.django_db


def test_keys_apart_only_by_case_accents_or_a_trailing_space_are_four_tasks():
    owner = Owner("alice")
    ids = [submit_task(key, add, owner, args=(n, n)) for n, key in enumerate(["e", "E", "é", "e "])]
    assert [get_task_status(task_id, owner).id for task_id in ids] == ids
    assert sorted(task.id for task in get_all_tasks(owner)) == sorted(ids)


def test_owners_apart_only_by_case_see_only_their_own():
    submit_task("k", add, Owner("alice"), args=(1, 2))
    flow = Workflow("w", Owner("alice"))
    flow.add("a", add, args=[1, 2])
    flow.submit()
    assert get_all_tasks(Owner("ALICE")) == []
    assert get_all_workflows(Owner("ALICE")) == []
    theirs = submit_task("k", add, Owner("ALICE"), args=(3, 4))
    assert get_task_status(theirs, Owner("ALICE")).owner == "ALICE"
