"""``{% task_progress task_id %}``: a task's progress, status and outcome on the site's own pages.

The tag renders the task as the signed-in user sees it now, and loads
``static/django_workers/task_progress.js``, which polls the REST API's
detail route (wherever the site mounted ``django_workers.urls``) as that
user, keeps the bar and the status up to date, shows the result or the error
when the task ends, and offers a Cancel button where the user may cancel (a
PATCH of the cancel route, with Django's CSRF token). Without JavaScript the
markup still shows the task as it was when the page was rendered.
"""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.core.exceptions import ImproperlyConfigured
from django.middleware.csrf import get_token
from django.urls import NoReverseMatch, reverse

from django_workers.api import get_task_status
from django_workers.exceptions import AuthorizationError, InvalidTaskKey, TaskNotFound
from django_workers.info import TERMINAL_STATUSES, TaskInfo, TaskStatus
from django_workers.web_authority import authority_for_user

register = template.Library()

#: Milliseconds between two reads of the task by the script.
POLL_INTERVAL_MS = 1500


@register.inclusion_tag("django_workers/task_progress.html", takes_context=True)
def task_progress(context: template.Context, task_id: str) -> dict[str, Any]:
    """Render ``task_id``'s progress box for the signed-in user; the script keeps it current."""
    request = context.get("request")
    if request is None:
        raise template.TemplateSyntaxError(
            "{% task_progress %} needs the request in the template context: add "
            "'django.template.context_processors.request' to the TEMPLATES "
            "context_processors, or render with a RequestContext."
        )
    task_id = str(task_id)
    try:
        # The last slash is the route's: an id that itself ends in "/" keeps its own.
        detail_url = reverse("django_workers:task-detail", kwargs={"task_id": task_id}) + "/"
        cancel_url = reverse("django_workers:task-cancel", kwargs={"task_id": task_id})
    except NoReverseMatch as e:
        raise ImproperlyConfigured(
            f"{{% task_progress %}} reads task {task_id!r} through the REST API, which it cannot "
            "reach: mount it with path('workers/', include('django_workers.urls')) in the "
            f"site's URLs (and give a task id, not an empty value). ({e})"
        ) from e
    task = _visible(request, task_id)
    return {
        "task_id": task_id,
        "task": task,
        "found": task is not None,
        "detail_url": detail_url,
        "cancel_url": cancel_url,
        "csrf_token": get_token(request),
        "ended": task is None or task.status in TERMINAL_STATUSES,
        "can_cancel": task is not None and task.status not in TERMINAL_STATUSES,
        "outcome": _outcome(task),
        "interval": POLL_INTERVAL_MS,
    }


def _visible(request: Any, task_id: str) -> TaskInfo | None:
    """The task as the signed-in user may see it; None when they may not (or are signed out)."""
    try:
        return get_task_status(task_id, authority_for_user(request.user))
    except (TaskNotFound, AuthorizationError, InvalidTaskKey):
        return None


def _outcome(task: TaskInfo | None) -> str:
    """What an ended task came to, as the script writes it: the result, or the error."""
    if task is None or task.status not in TERMINAL_STATUSES:
        return ""
    if task.status == TaskStatus.COMPLETED:
        return "Result: " + json.dumps(task.result)
    if task.error is not None:
        return f"{task.error.type}: {task.error.message}"
    return str(task.status).capitalize()
