"""Who may use which queue, and who may join a task someone else created.

Configured in settings (``DJANGO_WORKERS["QUEUE_AUTHORIZER"]`` and
``["WATCH_AUTHORIZER"]``); docs/tasks.md shows them. Each is a quick, pure
check over data in memory: it may run while a task's row is locked.
"""

from __future__ import annotations

STAFF_QUEUES = {"maintenance"}
STAFF = {"1", "2"}
TEAM = {"1": "ops", "2": "ops", "42": "sales", "43": "sales"}


def can_use_queue(queue_name: str, user_id: str) -> bool:
    return queue_name not in STAFF_QUEUES or user_id in STAFF


def can_join(task_id: str, watchers: tuple[str, ...], user_id: str) -> bool:
    team = TEAM.get(user_id)
    return team is not None and any(TEAM.get(w) == team for w in watchers)
