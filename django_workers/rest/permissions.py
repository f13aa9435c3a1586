"""Who may call the API at all: an authenticated, active user."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request


class IsActiveUser(BasePermission):
    """Allow authenticated, active users; which tasks they reach is the task API's scoping."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active)
