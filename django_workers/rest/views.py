"""The task and workflow routes: list, read and cancel, each a call of the public API.

A view never reads a model: ``get_all_tasks``, ``get_task_status``,
``cancel_task`` and their workflow twins scope every answer to the caller's
authority, so a task or workflow the caller may not see is ``TaskNotFound`` or
``WorkflowNotFound``, answered like a missing id.
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
from django_workers.authority import TASK_ID_MAX_LENGTH, Authority
from django_workers.exceptions import InvalidTaskKey
from django_workers.info import TaskInfo
from django_workers.rest.errors import exception_handler
from django_workers.rest.permissions import IsActiveUser
from django_workers.rest.schema import WorkersSchema
from django_workers.rest.serializers import (
    ErrorSerializer,
    TaskListQuerySerializer,
    TaskPageSerializer,
    TaskSerializer,
    WorkflowCancelQuerySerializer,
    WorkflowListQuerySerializer,
    WorkflowPageSerializer,
    WorkflowSerializer,
)
from django_workers.web_authority import authority_for_user
from django_workers.workflows import (
    WorkflowInfo,
    cancel_workflow,
    get_all_workflows,
    get_workflow_status,
)

#: What follows a task id in the cancel route; an id may itself end this way.
CANCEL_SUFFIX = "/actions/cancel"

#: What an id in a path may be: 1 to 255 printable characters (Python's ``str.isprintable``:
#: no Unicode "Other" or "Separator" but the ASCII space). Anything else is answered 400.
ID_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": TASK_ID_MAX_LENGTH,
    "pattern": r"^(?:[^\p{C}\p{Z}]| )+$",
}

TASK_ID_DESCRIPTION = (
    "The id submit_task returned (a user-scoped id is `<user id>::<key>`). Percent-encode "
    "what a URL path cannot hold; a `/` may stay as it is. An id that ends in `/` takes "
    "one more `/` after it: the last slash of a path is the route's."
)

TASK_ID = OpenApiParameter(
    "task_id",
    ID_SCHEMA,
    OpenApiParameter.PATH,
    description=TASK_ID_DESCRIPTION,
)

#: GET of a cancel path reads the task ``{task_id}/actions/cancel``: the id is shorter by that.
CANCEL_PATH_TASK_ID = OpenApiParameter(
    "task_id",
    {**ID_SCHEMA, "maxLength": TASK_ID_MAX_LENGTH - len(CANCEL_SUFFIX)},
    OpenApiParameter.PATH,
    description=TASK_ID_DESCRIPTION,
)

WORKFLOW_ID = OpenApiParameter(
    "workflow_id",
    ID_SCHEMA,
    OpenApiParameter.PATH,
    description=(
        "The workflow's id: `<user id>::<key>` for a user's workflow (percent-encode the `::` "
        "or send it as it is), the key itself for a System() workflow. A bare key names the "
        "caller's own workflow."
    ),
)


UNDO = OpenApiParameter(
    "undo",
    # The only value a cancel takes: true is refused, and leaving it out keeps the default.
    {"type": "boolean", "enum": [False]},
    OpenApiParameter.QUERY,
    description=(
        "false: cancel without running any undo step. Leave it out to compensate as the "
        "workflow was submitted (its undo_on_cancel). true is refused (400): a cancel may "
        "only narrow what the workflow was submitted with."
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
HIDDEN_WORKFLOW = {
    404: _error("No such workflow, or one the caller may not see: the two answers are the same.")
}
BAD_WORKFLOW_ID = _error("The id cannot be a workflow id (too long, or a control character).")


class WorkersAPIView(APIView):
    """Authenticated, active callers; errors answered as ``{"error", "detail"}``."""

    permission_classes = [IsActiveUser]
    # drf-spectacular's, whatever the site's DEFAULT_SCHEMA_CLASS; the views' class-level
    # extend_schema builds on it (a method-level one would build on the site's).
    schema = WorkersSchema()
    #: The schema's name for the view's operation, or for each of its methods.
    operation_id: str | dict[str, str] = ""

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


@extend_schema(
    methods=["GET"],
    tags=["tasks"],
    summary="Read the task whose id ends in /actions/cancel",
    description="GET never cancels: this path names the task whose id is "
    "`{task_id}/actions/cancel`, and reads it.",
    parameters=[CANCEL_PATH_TASK_ID],
    responses={200: TaskSerializer, **BAD_ID, **UNAUTHENTICATED, **HIDDEN},
)
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

    operation_id = {"PATCH": "tasks_cancel", "GET": "tasks_cancel_path_retrieve"}

    def patch(self, request: Request, task_id: str) -> Response:
        return task_answer(cancel_task(task_id, self.authority()))

    def get(self, request: Request, task_id: str) -> Response:
        # GET never cancels: this path names a task whose id ends in "/actions/cancel".
        return task_answer(get_task_status(task_id + CANCEL_SUFFIX, self.authority()))


# -- workflows ---------------------------------------------------------------------------------


def workflow_answer(info: WorkflowInfo) -> Response:
    """A workflow snapshot as JSON."""
    return Response(WorkflowSerializer(info).data)


def checked_workflow_id(workflow_id: str) -> str:
    """The id from the path, refused before any query if no workflow could have it."""
    # A NUL would reach PostgreSQL as an error rather than as "no such workflow".
    if len(workflow_id) > TASK_ID_MAX_LENGTH or not workflow_id.isprintable():
        raise InvalidTaskKey(
            f"A workflow id is at most {TASK_ID_MAX_LENGTH} printable characters; got "
            f"{len(workflow_id)} characters"
            f"{'' if workflow_id.isprintable() else ' with a control one'}."
        )
    return workflow_id


@extend_schema(
    tags=["workflows"],
    summary="List the caller's workflows, newest first",
    parameters=[WorkflowListQuerySerializer],
    responses={
        200: WorkflowPageSerializer,
        400: _error("An unknown state, or offset/limit out of range."),
        **UNAUTHENTICATED,
    },
)
class WorkflowListView(WorkersAPIView):
    """The workflows the caller owns (every workflow for a privileged user)."""

    operation_id = "workflows_list"

    def get(self, request: Request) -> Response:
        query = WorkflowListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        workflows = get_all_workflows(self.authority(), **query.validated_data)
        page = {**query.validated_data, "results": workflows}
        return Response(WorkflowPageSerializer(page).data)


@extend_schema(
    tags=["workflows"],
    summary="Read one workflow and its nodes",
    parameters=[WORKFLOW_ID],
    responses={
        200: WorkflowSerializer,
        400: BAD_WORKFLOW_ID,
        **UNAUTHENTICATED,
        **HIDDEN_WORKFLOW,
    },
)
class WorkflowDetailView(WorkersAPIView):
    """One workflow the caller may see."""

    operation_id = "workflows_retrieve"

    def get(self, request: Request, workflow_id: str) -> Response:
        info = get_workflow_status(checked_workflow_id(workflow_id), self.authority())
        return workflow_answer(info)


@extend_schema(
    tags=["workflows"],
    summary="Cancel a workflow",
    description="Answers the workflow's new snapshot. Waiting nodes are cancelled, queued "
    "ones never start, running ones are told to stop. Completed steps are undone as the "
    "workflow was submitted (its `undo_on_cancel`) unless `undo=false`; the state is then "
    "`compensating` until the undo steps have run.",
    parameters=[WORKFLOW_ID, UNDO],
    request=None,
    responses={
        200: WorkflowSerializer,
        400: _error("undo=true, an undo value that is not a boolean, or a bad id."),
        **UNAUTHENTICATED,
        **HIDDEN_WORKFLOW,
        409: _error("The workflow is no longer running (it ended, or it is compensating)."),
    },
)
class WorkflowCancelView(WorkersAPIView):
    """Cancel a running workflow the caller may see; ``undo`` may only narrow the default."""

    operation_id = "workflows_cancel"

    def patch(self, request: Request, workflow_id: str) -> Response:
        query = WorkflowCancelQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        info = cancel_workflow(
            checked_workflow_id(workflow_id), self.authority(), undo=query.validated_data["undo"]
        )
        return workflow_answer(info)
