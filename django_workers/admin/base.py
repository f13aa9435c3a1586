"""What every page of the app's admin shares: read-only pages, who may look, cancel reports."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest

from django_workers.authority import TASK_ID_MAX_LENGTH

EMPTY = "-"


class ReadOnlyAdmin(admin.ModelAdmin):
    """No adding, changing or deleting rows from the admin."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def is_active_staff(request: HttpRequest) -> bool:
    """Whether the user may open the app's pages at all; what they see is scoped further."""
    user = request.user
    return bool(user.is_active and user.is_staff)


@dataclass
class CancelOutcomes:
    """What a "Cancel selected" action did: ids by outcome, and how many were not visible."""

    #: The ids cancelled, under the message that reports them ("Cancelled", ...).
    cancelled: dict[str, list[str]] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)
    hidden: int = 0


def selected_ids(request: HttpRequest, queryset: QuerySet[Any]) -> list[str]:
    """The ids an action was asked for: the ticked boxes, or every row the user may see."""
    if request.POST.get("select_across") == "1":
        return [str(pk) for pk in queryset.values_list("pk", flat=True)]
    return request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)


def cancel_each(
    ids: Iterable[str],
    cancel: Callable[[str], str],
    not_found: type[Exception],
    ended: type[Exception],
) -> CancelOutcomes:
    """Cancel every id through ``cancel`` (which names its outcome); sort out what happened."""
    outcomes = CancelOutcomes()
    for object_id in ids:
        try:
            done = cancel(object_id)
        except not_found:
            outcomes.hidden += 1
        except ended:
            outcomes.ended.append(object_id)
        else:
            outcomes.cancelled.setdefault(done, []).append(object_id)
    return outcomes


def report(
    model_admin: admin.ModelAdmin, request: HttpRequest, outcomes: CancelOutcomes, noun: str
) -> None:
    """One message per outcome; ids the user may not see are counted, never named."""
    for done, ids in outcomes.cancelled.items():
        model_admin.message_user(request, f"{done}: {', '.join(ids)}.", messages.SUCCESS)
    if outcomes.ended:
        model_admin.message_user(
            request, f"Already ended: {', '.join(outcomes.ended)}.", messages.WARNING
        )
    if outcomes.hidden:
        model_admin.message_user(
            request,
            f"{outcomes.hidden} selected {noun}(s) not found or not visible to you; "
            "nothing was done.",
            messages.ERROR,
        )


def could_be_id(object_id: str) -> bool:
    """Whether a task or workflow could have this id; a NUL would reach PostgreSQL as an error."""
    return 0 < len(object_id) <= TASK_ID_MAX_LENGTH and object_id.isprintable()
