"""The task authority of a signed-in web user, shared by the admin and the REST API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_workers.authority import Authority, Owner, System

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

#: Holders see and cancel every task (superusers hold every permission).
MANAGE_ALL_TASKS = "django_workers.manage_all_tasks"


def authority_for_user(user: AbstractBaseUser | AnonymousUser) -> Authority:
    """System() for a holder of manage_all_tasks, else the user's own Owner."""
    # A custom user model without PermissionsMixin has no has_perm: it holds no permission.
    has_perm = getattr(user, "has_perm", None)
    if user.is_active and has_perm is not None and has_perm(MANAGE_ALL_TASKS):
        return System()
    return Owner.for_user(user)
