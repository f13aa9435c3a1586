"""Running a finished task again from the admin: a button on its page and a list action.

Both re-run through ``operations.retry_as``, the path of ``manage.py workers
retry``, with the signed-in user's authority: a user may run their own FAILED
or CANCELLED tasks again, and holders of ``manage_all_tasks`` anyone's. The
re-run is an ordinary submit of the task's key by its owner, so the queue
authorizer is asked as for the owner's own submit.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from django_workers import operations
from django_workers.admin.base import could_be_id, selected_ids
from django_workers.authority import System
from django_workers.exceptions import (
    AuthorizationError,
    TaskNotFound,
    TaskNotRetryable,
    WorkersError,
)
from django_workers.models import TaskRecord
from django_workers.stores import default_store
from django_workers.web_authority import authority_for_user

#: What a retry came to, for the messages: the order they are shown in.
RETRIED, NOT_ENDED, NOT_YOURS, REFUSED = "retried", "not ended", "not yours", "refused"


def may_retry(request: HttpRequest, task: TaskRecord) -> bool:
    """Whether the task's page offers "Run again": it ended FAILED or CANCELLED, and may be."""
    if task.status not in operations.RETRYABLE:
        return False
    authority = authority_for_user(request.user)
    return isinstance(authority, System) or task.owner == authority.user_id


def retry_one(request: HttpRequest, task_id: str) -> tuple[str, str]:
    """Run one task again as the signed-in user: (outcome, what to tell them).

    Raises TaskNotFound when the user may not see the task.
    """
    if not could_be_id(task_id):
        raise TaskNotFound(task_id)
    authority = authority_for_user(request.user)
    try:
        old, run_id = operations.retry_as(task_id, authority, store=default_store())
    except TaskNotRetryable as e:
        return NOT_ENDED, (
            f"Task {task_id} is {e.status}: only a FAILED or CANCELLED task runs again; "
            "nothing was done."
        )
    except AuthorizationError as e:
        return NOT_YOURS, f"{e} Nothing was done."
    except TaskNotFound:
        raise
    except WorkersError as e:  # refused by the queue authorizer, say
        return REFUSED, f"Task {task_id} was not run again: {e}"
    return RETRIED, f"Task {task_id} will run again (it was {old.status}; new run {run_id})."


LEVELS = {
    RETRIED: messages.SUCCESS,
    NOT_ENDED: messages.WARNING,
    NOT_YOURS: messages.ERROR,
    REFUSED: messages.ERROR,
}


def retry_view(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, object_id: str
) -> HttpResponse:
    """Run one task again; report it and go back to its page (404 if it is not visible)."""
    task_id = unquote(object_id)
    if not model_admin.has_view_permission(request):
        raise Http404
    try:
        outcome, message = retry_one(request, task_id)
    except TaskNotFound:
        raise Http404 from None
    model_admin.message_user(request, message, LEVELS[outcome])
    opts = model_admin.opts
    return HttpResponseRedirect(
        reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(task_id)])
    )


def retry_url(model_admin: admin.ModelAdmin[Any]) -> URLPattern:
    """The button's route: a POST (with Django's CSRF token) to ``<task>/retry/``."""

    def view(request: HttpRequest, object_id: str) -> HttpResponse:
        return retry_view(model_admin, request, object_id)

    opts = model_admin.opts
    return path(
        "<path:object_id>/retry/",
        model_admin.admin_site.admin_view(require_POST(view)),
        name=f"{opts.app_label}_{opts.model_name}_retry",
    )


@admin.action(description="Run selected tasks again (FAILED or CANCELLED ones)")
def retry_selected(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[TaskRecord]
) -> None:
    """Run each selected task again as the user; one message per outcome."""
    by_outcome: dict[str, list[str]] = defaultdict(list)
    hidden = 0
    for task_id in selected_ids(request, queryset):
        try:
            outcome, _message = retry_one(request, task_id)
        except TaskNotFound:
            hidden += 1
        else:
            by_outcome[outcome].append(task_id)
    headings = {
        RETRIED: "Running again",
        NOT_ENDED: "Not run again, not FAILED or CANCELLED",
        NOT_YOURS: "Not run again, owned by someone else",
        REFUSED: "Not run again, refused (see each task's queue)",
    }
    for outcome, heading in headings.items():
        if by_outcome[outcome]:
            ids = ", ".join(by_outcome[outcome])
            model_admin.message_user(request, f"{heading}: {ids}.", LEVELS[outcome])
    if hidden:
        model_admin.message_user(
            request,
            f"{hidden} selected task(s) not found or not visible to you; nothing was done.",
            messages.ERROR,
        )
