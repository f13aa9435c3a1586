"""Who is asking: ``Owner`` and ``System``, and how task ids encode ownership.

``submit_task`` returns an id that is not the key passed in. A user-scoped id
is ``"<user_id>::<key>"``; a global id is the key itself. The rules on owner
ids and keys below are what make (user, key) -> id injective, keep the two id
spaces disjoint, and make ``owner_of`` the exact inverse of ``scoped_task_key``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from django_workers.exceptions import AuthorizationError, InvalidTaskKey

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

SEPARATOR = "::"
KEY_MAX_LENGTH = 200
# Owner ids are short enough that every task id fits 255 characters, the longest
# indexed CharField that Django accepts on every supported database (mysql.W003).
OWNER_MAX_LENGTH = 53
# Longest id: owner + separator + key; the primary key column is sized from it.
TASK_ID_MAX_LENGTH = OWNER_MAX_LENGTH + len(SEPARATOR) + KEY_MAX_LENGTH

Scope = Literal["user", "global"]
SCOPES: tuple[Scope, ...] = ("user", "global")


def _check_printable(value: str, what: str) -> None:
    if not value.isprintable():
        raise InvalidTaskKey(
            f"{what} {value!r} contains a control or non-printable character; "
            "use printable characters only."
        )


@dataclass(frozen=True, slots=True)
class Owner:
    """A validated user identity; sees only the tasks it owns or watches."""

    user_id: str

    def __post_init__(self) -> None:
        uid = self.user_id
        if not isinstance(uid, str):
            raise TypeError(
                f"Owner needs the user id as a string, got {type(uid).__name__}; "
                "use Owner.for_user(user) to build one from a Django user."
            )
        if not uid:
            raise InvalidTaskKey("Owner user id is empty; an empty id would be no identity.")
        if len(uid) > OWNER_MAX_LENGTH:
            raise InvalidTaskKey(
                f"Owner user id is {len(uid)} characters; at most {OWNER_MAX_LENGTH} are allowed."
            )
        if SEPARATOR in uid or uid.endswith(":"):
            raise InvalidTaskKey(
                f"Owner user id {uid!r} contains '::' or ends with ':'; such an id would "
                "make task ids ambiguous. Use an id without those."
            )
        _check_printable(uid, "Owner user id")

    @classmethod
    def for_user(cls, user: AbstractBaseUser | AnonymousUser | Any) -> Owner:
        """Build the authority of a Django user (its primary key as a string)."""
        if user is None or not getattr(user, "is_authenticated", False):
            raise AuthorizationError("An anonymous user has no task authority; log in first.")
        if not getattr(user, "is_active", True):
            raise AuthorizationError(f"User {user.pk} is inactive and has no task authority.")
        return cls(str(user.pk))


@dataclass(frozen=True, slots=True)
class System:
    """The explicit, unscoped authority: sees and manages every task."""


Authority = Owner | System


def check_authority(authority: object) -> Authority:
    """Return ``authority`` if it is an Owner or System, else raise TypeError."""
    if isinstance(authority, Authority):  # the union made once, not on each call
        return authority
    hint = " (wrap a user id in Owner(...))" if isinstance(authority, str) else ""
    raise TypeError(
        f"authority must be Owner(user_id) or System(), got {type(authority).__name__}{hint}. "
        "There is no default authority."
    )


def user_id_of(authority: Authority) -> str | None:
    """The user id an authority acts as, None for System."""
    return authority.user_id if isinstance(authority, Owner) else None


def validate_key(key: object) -> str:
    """Return ``key`` if it is a valid task key, else raise InvalidTaskKey."""
    if not isinstance(key, str):
        raise InvalidTaskKey(f"A task key must be a string, got {type(key).__name__}.")
    if not 1 <= len(key) <= KEY_MAX_LENGTH:
        raise InvalidTaskKey(
            f"A task key must be 1 to {KEY_MAX_LENGTH} characters long, got {len(key)}."
        )
    _check_printable(key, "Task key")
    return key


def scoped_task_key(key: str, authority: Authority, scope: Scope = "user") -> str:
    """Return the task id that ``submit_task(key, ..., authority, scope=scope)`` uses."""
    return key_scoper(authority, scope)(key)


def key_scoper(authority: Authority, scope: Scope = "user") -> Callable[[str], str]:
    """``scoped_task_key`` for one authority and scope, as a function of the key.

    The authority and scope are checked here, once for a batch of keys.
    """
    check_authority(authority)
    if scope == "user":
        if not isinstance(authority, Owner):
            raise InvalidTaskKey(
                "System() has no owner, so it cannot use scope='user'; pass scope='global'."
            )
        prefix = f"{authority.user_id}{SEPARATOR}"

        def user_key(key: str) -> str:
            return prefix + validate_key(key)

        return user_key
    if scope == "global":

        def global_key(key: str) -> str:
            if SEPARATOR in validate_key(key):
                raise InvalidTaskKey(
                    f"A global key may not contain '::' (got {key!r}); that space is reserved "
                    "for user-scoped ids."
                )
            return key

        return global_key
    raise InvalidTaskKey(f"scope must be 'user' or 'global', got {scope!r}.")


def owner_of(task_id: str) -> Owner | None:
    """Return the Owner of a user-scoped id, None for a global one."""
    user_id, sep, _key = task_id.partition(SEPARATOR)
    if not sep:
        return None
    return Owner(user_id)
