"""The one place a request's user becomes a task authority."""

from __future__ import annotations

from typing import Any

from django_workers.authority import Authority, Owner, System

#: Holders see and cancel every task; Django's superusers hold every permission.
MANAGE_ALL_TASKS = "django_workers.manage_all_tasks"


def authority_of(user: Any) -> Authority:
    """Return System() for a holder of manage_all_tasks, else the user's Owner.

    An anonymous or inactive user has no authority: AuthorizationError.
    """
    owner = Owner.for_user(user)
    return System() if user.has_perm(MANAGE_ALL_TASKS) else owner
