"""Who may see a task, a workflow or a schedule: the one rule every reader applies.

``System()`` sees everything. An ``Owner`` sees what it owns and what it
watches:

- a task: its id's owner half names the user (derived from the id, so no lost
  write can evict an owner), or the user is one of its watchers. A global
  task's watchers are its whole gate, its creator included;
- a workflow: its ``owner`` is the user, or the user is one of its watchers.
  Its watchers are copied to every record of its nodes and undo steps, so its
  tasks show to the same people, and "watches the workflow" is, in a query,
  "watches one of its records";
- a schedule: its ``owner`` is the user (its ticks are that user's tasks).

Seeing is also cancelling: whoever may read a task or workflow may cancel it.
Everything that may not be seen reads exactly like what does not exist.

The rule is written here twice, once per form, and nowhere else: in Python
for one record already read (the API, handles, the memory store), and as
Django ``Q`` filters for querysets (the admin, the database store). Each
form takes the reader's user id, ``None`` for ``System()``. The database
store's one-statement SQL reads hold the same filters as SQL; the contract
tests run the same cases through every path and compare.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db.models import Q

from django_workers.authority import Authority, owner_of, user_id_of

if TYPE_CHECKING:
    from django_workers.engine.records import WorkflowInfo
    from django_workers.info import TaskInfo


# -- one record ------------------------------------------------------------------------------


def sees(user_id: str | None, owner: str | None, watchers: Iterable[str]) -> bool:
    """Whether ``user_id`` (None: System) may see what ``owner`` owns and ``watchers`` watch."""
    return user_id is None or (owner is not None and owner == user_id) or user_id in watchers


def sees_task(user_id: str | None, task_id: str, watchers: Iterable[str]) -> bool:
    """Whether ``user_id`` may see and cancel the task ``task_id`` that ``watchers`` watch."""
    if user_id is None:
        return True
    owner = owner_of(task_id)
    return sees(user_id, None if owner is None else owner.user_id, watchers)


def may_see_task(info: TaskInfo, authority: Authority) -> bool:
    """Whether ``authority`` may read and cancel the task ``info`` describes."""
    return sees_task(user_id_of(authority), info.id, info.watchers)


def may_see_workflow(info: WorkflowInfo, authority: Authority) -> bool:
    """Whether ``authority`` may read and cancel the workflow ``info`` describes."""
    return sees(user_id_of(authority), info.owner, info.watchers)


# -- querysets -------------------------------------------------------------------------------


def owned_tasks(user_id: str) -> Q:
    """The tasks whose id names ``user_id`` as owner: half of what an Owner sees."""
    return Q(owner=user_id)


def watched_tasks(user_id: str) -> Q:
    """The tasks ``user_id`` watches: the other half.

    A listing reads the two halves apart, each along its own index, and merges
    them: one query with "owned OR watched" walks the whole table newest first.
    """
    from django_workers.models import TaskWatcher

    return Q(id__in=TaskWatcher.objects.filter(user_id=user_id).values("task_id"))


def tasks(user_id: str | None) -> Q:
    """The task records ``user_id`` may see (every one for None, System)."""
    if user_id is None:
        return Q()
    return owned_tasks(user_id) | watched_tasks(user_id)


def workflows(user_id: str | None) -> Q:
    """The workflow records ``user_id`` may see (every one for None, System).

    A watcher of a workflow watches each of its records (they are given its
    watchers when written), so the workflows it watches are those its watched
    records belong to, found along the watcher index.
    """
    if user_id is None:
        return Q()
    from django_workers.models import TaskRecord

    watched = TaskRecord.objects.filter(watched_tasks(user_id), workflow__isnull=False)
    return Q(owner=user_id) | Q(id__in=watched.values("workflow"))


def schedules(user_id: str | None) -> Q:
    """The schedules ``user_id`` may see: the ones whose ticks it owns (all for System)."""
    return Q() if user_id is None else Q(owner=user_id)
