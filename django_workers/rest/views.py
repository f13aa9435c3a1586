"""The task routes: list, read and cancel, each a call of the public task API.

A view never reads a model: ``get_all_tasks``, ``get_task_status`` and
``cancel_task`` scope every answer to the caller's authority, so a task the
caller may not see is ``TaskNotFound``, answered like a missing id.
"""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from django_workers.api import cancel_task, get_all_tasks, get_task_status
from django_workers.authority import Authority
from django_workers.info import TaskInfo
from django_workers.rest.errors import exception_handler
from django_workers.rest.permissions import IsActiveUser
from django_workers.rest.schema import WorkersSchema
from django_workers.rest.serializers import (
    ErrorSerializer,
    TaskListQuerySerializer,
    TaskPageSerializer,
    TaskSerializer,
)
from django_workers.web_authority import authority_for_user

#: What follows a task id in the cancel route; an id may itself end this way.
CANCEL_SUFFIX = "/actions/cancel"

TASK_ID = OpenApiParameter(
    "task_id",
    str,
    OpenApiParameter.PATH,
    description=(
        "The id submit_task returned (a user-scoped id is `<user id>::<key>`). Percent-encode "
        "what a URL path cannot hold; a `/` may stay as it is. An id that ends in `/` takes "
        "one more `/` after it: the last slash of a path is the route's."
    ),
)


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


UNAUTHENTICATED = {
    401: _error("Not logged in, where the site's DRF authentication asks for credentials."),
    403: _error("Not logged in (session authentication), or the user is inactive."),
}
HIDDEN = {404: _error("No such task, or one the caller may not see: the two answers are the same.")}
BAD_ID = {400: _error("The id cannot be a task id (too long, or a control character).")}


class WorkersAPIView(APIView):
    """Authenticated, active callers; errors answered as ``{"error", "detail"}``."""

    permission_classes = [IsActiveUser]
    # drf-spectacular's, whatever the site's DEFAULT_SCHEMA_CLASS; the views' class-level
    # extend_schema builds on it (a method-level one would build on the site's).
    schema = WorkersSchema()
    #: The schema's name for the view's one documented operation.
    operation_id = ""

    def get_authenticators(self) -> list[BaseAuthentication]:
        # The site's DRF settings as they are now, not as they were when this module loaded.
        classes = api_settings.DEFAULT_AUTHENTICATION_CLASSES
        return [cast(type[BaseAuthentication], authenticator)() for authenticator in classes]

    def get_exception_handler(self) -> Any:
        return exception_handler

    def authority(self) -> Authority:
        """The caller's authority: its Owner, or System() for manage_all_tasks."""
        return authority_for_user(self.request.user)


def task_answer(info: TaskInfo) -> Response:
    """A task snapshot as JSON."""
    return Response(TaskSerializer(info).data)


@extend_schema(
    tags=["tasks"],
    summary="List the caller's tasks, newest first",
    parameters=[TaskListQuerySerializer],
    responses={
        200: TaskPageSerializer,
        400: _error("An unknown status, or offset/limit out of range."),
        **UNAUTHENTICATED,
    },
)
class TaskListView(WorkersAPIView):
    """The tasks the caller owns or watches (every task for a privileged user)."""

    operation_id = "tasks_list"

    def get(self, request: Request) -> Response:
        query = TaskListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        tasks = get_all_tasks(self.authority(), **query.validated_data)
        page = {**query.validated_data, "results": tasks}
        return Response(TaskPageSerializer(page).data)


@extend_schema(
    tags=["tasks"],
    summary="Read one task",
    parameters=[TASK_ID],
    responses={200: TaskSerializer, **BAD_ID, **UNAUTHENTICATED, **HIDDEN},
)
class TaskDetailView(WorkersAPIView):
    """One task the caller may see."""

    operation_id = "tasks_retrieve"

    def get(self, request: Request, task_id: str) -> Response:
        return task_answer(get_task_status(task_id, self.authority()))


@extend_schema(methods=["GET"], exclude=True)
@extend_schema(
    methods=["PATCH"],
    tags=["tasks"],
    summary="Cancel a task",
    description="Answers the task's new snapshot. A pending task never runs; a running "
    "one ends CANCELLED at once and its code is told to stop.",
    parameters=[TASK_ID],
    request=None,
    responses={
        200: TaskSerializer,
        **BAD_ID,
        **UNAUTHENTICATED,
        **HIDDEN,
        409: _error("The task has already ended."),
    },
)
class TaskCancelView(WorkersAPIView):
    """Cancel a task the caller may see; 409 once it has ended."""

    operation_id = "tasks_cancel"

    def patch(self, request: Request, task_id: str) -> Response:
        return task_answer(cancel_task(task_id, self.authority()))

    def get(self, request: Request, task_id: str) -> Response:
        # GET never cancels: this path names a task whose id ends in "/actions/cancel".
        return task_answer(get_task_status(task_id + CANCEL_SUFFIX, self.authority()))
