"""What every page of the app's admin shares: read-only pages, who may look, owners, reports."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from django_workers.authority import TASK_ID_MAX_LENGTH

EMPTY = "-"

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin
else:

    class _ModelAdmin[M: Model](admin.ModelAdmin):
        """Django's ModelAdmin, which takes its model as a type argument as its stubs do."""


class ReadOnlyAdmin[M: Model](_ModelAdmin[M]):
    """No adding, changing or deleting rows from the admin; no lookups into JSON columns."""

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        # A JSON lookup from the URL (?args__contains=) is not supported on every database
        # (SQLite raises when the query runs): refused, the admin answers 400.
        field = lookup.split("__", 1)[0]
        if field in json_fields(self.model):
            return False
        return bool(super().lookup_allowed(lookup, value, request))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def badge(state: str, text: str) -> str:
    """A state as a small label in the workflow picture's colours."""
    from django_workers.workflow_svg import colours

    fill, stroke = colours(state)
    return format_html(
        '<span class="dw-state dw-state-{}" style="background:{};border:1px solid {};'
        'color:#111827;padding:0 6px;border-radius:8px;white-space:nowrap">{}</span>',
        state,
        fill,
        stroke,
        text,
    )


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


def json_fields(model: type[Model]) -> frozenset[str]:
    """The names of a model's JSON columns."""
    return frozenset(
        f.name for f in model._meta.concrete_fields if f.get_internal_type() == "JSONField"
    )


def selected_ids(request: HttpRequest, queryset: QuerySet[Any]) -> list[str]:
    """The ids an action was asked for, each once: the ticked boxes, or every visible row."""
    if request.POST.get("select_across") == "1":
        return [str(pk) for pk in queryset.values_list("pk", flat=True)]
    # A repeated id (a forged or doubled form) is one task, reported once.
    return list(dict.fromkeys(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)))


# -- users, by name --------------------------------------------------------------------------


def users_by_id(user_ids: Iterable[str | None]) -> dict[str, Any]:
    """The users these owner ids name, from one query; ids that name no user are left out."""
    ids = {uid for uid in user_ids if uid}
    keys = [pk for pk in map(_pk_of, ids) if pk is not None]
    return {str(user.pk): user for user in get_user_model()._default_manager.filter(pk__in=keys)}


def user_labels(
    user_ids: Iterable[str | None], request: HttpRequest, admin_site: admin.AdminSite
) -> dict[str, str]:
    """Each user id as the user's name, linked to their admin page where the viewer may open it.

    An id that names no user stays as it is.
    """
    ids = [uid for uid in user_ids if uid]
    labels = {uid: uid for uid in ids}
    model = get_user_model()
    user_admin = admin_site.get_model_admin(model) if admin_site.is_registered(model) else None
    for uid, user in users_by_id(ids).items():
        may_open = user_admin is not None and user_admin.has_view_permission(request, user)
        url = _change_url(user) if may_open else None
        if url:
            labels[uid] = format_html('<a href="{}" title="user {}">{}</a>', url, uid, user)
        else:
            labels[uid] = format_html('<span title="user {}">{}</span>', uid, user)
    return labels


def _pk_of(user_id: str) -> Any:
    """The user model's primary key for an owner id, or None if no user could have it."""
    field = get_user_model()._meta.pk
    try:
        value = field.to_python(user_id)
        field.run_validators(value)  # an integer past the column's range, say
    except (ValidationError, ValueError, TypeError):
        return None
    return value


def _change_url(user: Any) -> str | None:
    opts = user._meta
    try:
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(user.pk)])
    except NoReverseMatch:
        return None


def name_owners(rows: Iterable[Any], request: HttpRequest, admin_site: admin.AdminSite) -> None:
    """Give each row an ``owner_label``: its owner's name (linked), from one query."""
    rows = list(rows)
    labels = user_labels((row.owner for row in rows), request, admin_site)
    for row in rows:
        row.owner_label = labels.get(row.owner) if row.owner else None


class OwnerFilter(admin.SimpleListFilter):
    """The owners of the rows the viewer may see, by name."""

    title = "owner"
    parameter_name = "owner"
    #: Most owners offered; beyond that, search by owner id.
    MOST = 50

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        visible = model_admin.get_queryset(request).exclude(owner=None)
        owners = list(
            visible.order_by("owner").values_list("owner", flat=True).distinct()[: self.MOST]
        )
        users = users_by_id(owners)
        return [(owner, str(users.get(owner, owner))) for owner in owners]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(owner=self.value()) if self.value() else queryset


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
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, outcomes: CancelOutcomes, noun: str
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
