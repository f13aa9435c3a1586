"""The task and workflow routes: list, read, cancel and re-run, each a call of the public API.

A view never reads a model: ``get_all_tasks``, ``get_task_status``,
``cancel_task`` and their workflow twins scope every answer to the caller's
authority, so a task or workflow the caller may not see is ``TaskNotFound`` or
``WorkflowNotFound``, answered like a missing id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions as drf
from rest_framework.authentication import BaseAuthentication
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from django_workers.api import cancel_task, get_all_tasks, get_task_status
from django_workers.authority import TASK_ID_MAX_LENGTH, Authority
from django_workers.exceptions import InvalidTaskKey, TaskNotFound
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
    WorkflowRerunQuerySerializer,
    WorkflowSerializer,
)
from django_workers.web_authority import authority_for_user
from django_workers.workflows import (
    WorkflowInfo,
    cancel_workflow,
    get_all_workflows,
    get_workflow_status,
    rerun_workflow,
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
        "caller's own workflow, else a System() workflow it watches."
    ),
)


DROP_UNDO = OpenApiParameter(
    "drop_undo",
    bool,
    OpenApiParameter.QUERY,
    description=(
        "true, with undo=false: drop the compensation an earlier cancel asked for, while "
        "nodes still run. Without it such a cancel is refused (409 cancel_narrows)."
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
NOT_ACCEPTABLE = {
    406: _error("`format` names an encoding this API does not answer in (it answers `json`).")
}
GET_NOT_CANCEL = _error(
    "GET never cancels: the answer's Allow header lists the methods of this path (PATCH cancels)."
)


class WorkersNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, answering an unknown ``?format=`` 406 rather than 404."""

    def filter_renderers(
        self, renderers: Iterable[BaseRenderer], format: str
    ) -> list[BaseRenderer]:
        renderers = list(renderers)
        chosen = [renderer for renderer in renderers if renderer.format == format]
        if not chosen:
            known = ", ".join(sorted({str(renderer.format) for renderer in renderers}))
            raise drf.NotAcceptable(f"format={format!r} is not one of: {known}.")
        return chosen


class WorkersAPIView(APIView):
    """Authenticated, active callers; errors answered as ``{"error", "detail"}``."""

    permission_classes = [IsActiveUser]
    # drf-spectacular's, whatever the site's DEFAULT_SCHEMA_CLASS; the views' class-level
    # extend_schema builds on it (a method-level one would build on the site's).
    schema = WorkersSchema()
    #: The schema's name for the view's operation, or for each of its methods.
    operation_id: str | dict[str, str] = ""
    #: The query parameters the view reads; any other, or one given twice, is refused.
    query_parameters: frozenset[str] = frozenset()
    content_negotiation_class = WorkersNegotiation

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.check_query_parameters(request)

    def check_query_parameters(self, request: Request) -> None:
        """Refuse a parameter the route does not read, or one given more than once."""
        # DRF's own parameter that picks the answer's encoding (?format=json), if the site has it.
        override = api_settings.URL_FORMAT_OVERRIDE
        known = self.query_parameters | ({override} if override else set())
        for name, values in request.query_params.lists():
            if name not in known:
                takes = ", ".join(sorted(known))
                raise drf.ValidationError(
                    f"Unknown query parameter {name!r}: this route takes {takes}."
                )
            if len(values) > 1:
                raise drf.ValidationError(
                    f"Query parameter {name!r} is given {len(values)} times; give it once."
                )

    def get_authenticators(self) -> list[BaseAuthentication]:
        # The site's DRF settings as they are now, not as they were when this module loaded.
        classes: Sequence[type[BaseAuthentication]] = api_settings.DEFAULT_AUTHENTICATION_CLASSES
        return [authenticator() for authenticator in classes]

    def get_exception_handler(self) -> Any:
        return exception_handler

    def authority(self) -> Authority:
        """The caller's authority: its Owner, or System() for manage_all_tasks."""
        return authority_for_user(self.request.user)


class CancelRoute(WorkersAPIView):
    """A cancel path: PATCH cancels; a GET that reads nothing is 405, allowing PATCH."""

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code == 405:
            # DRF lists every method the view defines; GET here only reads odd task ids.
            response["Allow"] = "PATCH, OPTIONS"
        return response


def task_answer(info: TaskInfo) -> Response:
    """A task snapshot as JSON."""
    return Response(TaskSerializer(info).data)


@extend_schema(
    tags=["tasks"],
    summary="List the caller's tasks, newest first",
    parameters=[TaskListQuerySerializer],
    responses={
        200: TaskPageSerializer,
        400: _error(
            "An unknown status, offset/limit out of range, or a query parameter that is "
            "unknown or given twice."
        ),
        **UNAUTHENTICATED,
        **NOT_ACCEPTABLE,
    },
)
class TaskListView(WorkersAPIView):
    """The tasks the caller owns or watches (every task for a privileged user)."""

    operation_id = "tasks_list"
    query_parameters = frozenset(TaskListQuerySerializer().fields)

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
    responses={200: TaskSerializer, **BAD_ID, **UNAUTHENTICATED, **HIDDEN, **NOT_ACCEPTABLE},
)
class TaskDetailView(WorkersAPIView):
    """One task the caller may see."""

    operation_id = "tasks_retrieve"

    def get(self, request: Request, task_id: str) -> Response:
        return task_answer(get_task_status(task_id, self.authority()))


@extend_schema(
    methods=["GET"],
    tags=["tasks"],
    summary="GET never cancels: 405, or the task whose id ends in /actions/cancel",
    description="GET never cancels. It answers 405 with an `Allow` header (PATCH cancels), "
    "unless the caller may see a task whose id is `{task_id}/actions/cancel`: that task is "
    "read.",
    parameters=[CANCEL_PATH_TASK_ID],
    responses={
        200: TaskSerializer,
        **UNAUTHENTICATED,
        405: GET_NOT_CANCEL,
        **NOT_ACCEPTABLE,
    },
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
        **NOT_ACCEPTABLE,
        409: _error("The task has already ended."),
    },
)
class TaskCancelView(CancelRoute):
    """Cancel a task the caller may see; 409 once it has ended."""

    operation_id = {"PATCH": "tasks_cancel", "GET": "tasks_cancel_path_retrieve"}

    def patch(self, request: Request, task_id: str) -> Response:
        return task_answer(cancel_task(task_id, self.authority()))

    def get(self, request: Request, task_id: str) -> Response:
        # GET never cancels; the path may still name a task whose id ends in "/actions/cancel".
        try:
            return task_answer(get_task_status(task_id + CANCEL_SUFFIX, self.authority()))
        except (TaskNotFound, InvalidTaskKey):
            raise not_a_cancel(request) from None


def not_a_cancel(request: Request) -> drf.MethodNotAllowed:
    """The 405 of a GET on a cancel path; DRF adds the Allow header."""
    return drf.MethodNotAllowed(
        request.method or "GET",
        detail="GET does not cancel: send PATCH to this URL to cancel. (Allow lists the "
        "methods of this path.)",
    )


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
    summary="List the workflows the caller owns or watches, newest first",
    parameters=[WorkflowListQuerySerializer],
    responses={
        200: WorkflowPageSerializer,
        400: _error(
            "An unknown state, offset/limit out of range, or a query parameter that is "
            "unknown or given twice."
        ),
        **UNAUTHENTICATED,
        **NOT_ACCEPTABLE,
    },
)
class WorkflowListView(WorkersAPIView):
    """The workflows the caller owns or watches (every workflow for a privileged user)."""

    operation_id = "workflows_list"
    query_parameters = frozenset(WorkflowListQuerySerializer().fields)

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
        **NOT_ACCEPTABLE,
    },
)
class WorkflowDetailView(WorkersAPIView):
    """One workflow the caller may see."""

    operation_id = "workflows_retrieve"

    def get(self, request: Request, workflow_id: str) -> Response:
        info = get_workflow_status(checked_workflow_id(workflow_id), self.authority())
        return workflow_answer(info)


@extend_schema(
    methods=["GET"],
    tags=["workflows"],
    summary="GET never cancels: 405",
    description="Answers 405 with an `Allow` header: PATCH this path to cancel.",
    parameters=[WORKFLOW_ID],
    responses={**UNAUTHENTICATED, 405: GET_NOT_CANCEL, **NOT_ACCEPTABLE},
)
@extend_schema(
    methods=["PATCH"],
    tags=["workflows"],
    summary="Cancel a workflow",
    description="Answers the workflow's new snapshot. Waiting nodes are cancelled, queued "
    "ones never start, running ones are told to stop. Completed steps are undone as the "
    "workflow was submitted (its `undo_on_cancel`) unless `undo=false`. The state shows the "
    "cancel at once: `compensating` if completed steps are to be undone, else `cancelling` "
    "while nodes still run, then the end. Repeating a cancel while nodes still run changes "
    "nothing and answers 200, except `undo=false` after a cancel that compensates: that "
    "drops the compensation, so it is refused (409 `cancel_narrows`) unless "
    "`drop_undo=true`.",
    parameters=[WORKFLOW_ID, UNDO, DROP_UNDO],
    request=None,
    responses={
        200: WorkflowSerializer,
        400: _error(
            "undo=true, an undo or drop_undo value that is not a boolean, a query parameter "
            "that is unknown or given twice, or a bad id."
        ),
        **UNAUTHENTICATED,
        **HIDDEN_WORKFLOW,
        **NOT_ACCEPTABLE,
        409: _error(
            "The workflow is no longer running (it ended, or its undo steps run), or "
            "undo=false would drop the compensation an earlier cancel asked for."
        ),
    },
)
class WorkflowCancelView(CancelRoute):
    """Cancel a running workflow the caller may see; ``undo`` may only narrow the default."""

    operation_id = {"PATCH": "workflows_cancel", "GET": "workflows_cancel_path_retrieve"}
    query_parameters = frozenset(WorkflowCancelQuerySerializer().fields)

    def patch(self, request: Request, workflow_id: str) -> Response:
        query = WorkflowCancelQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        info = cancel_workflow(
            checked_workflow_id(workflow_id),
            self.authority(),
            undo=query.validated_data["undo"],
            drop_undo=query.validated_data["drop_undo"],
        )
        return workflow_answer(info)

    def get(self, request: Request, workflow_id: str) -> Response:
        raise not_a_cancel(request)


@extend_schema(
    tags=["workflows"],
    summary="Re-run a workflow from where it failed",
    description="Answers the workflow's new snapshot. A workflow that ended `failed`, "
    "`cancelled` or `compensation_failed` runs again: completed nodes keep their results and "
    "do not run again; the failed, cancelled and never-run nodes (and those after them) run "
    "again in dependency order, keeping their earlier errors; `runs` counts the runs. "
    "`plan_hash` (the one the caller read) makes sure the workflow under this id is still "
    "that plan. Only the owner (or a privileged user) may re-run a workflow.",
    parameters=[WORKFLOW_ID, WorkflowRerunQuerySerializer],
    request=None,
    responses={
        200: WorkflowSerializer,
        400: _error(
            "A plan_hash that is not 64 hex digits, a query parameter that is unknown or "
            "given twice, or a bad id."
        ),
        **UNAUTHENTICATED,
        **HIDDEN_WORKFLOW,
        **NOT_ACCEPTABLE,
        409: _error(
            "The workflow cannot be re-run (cannot_rerun): it is running or completed, it was "
            "compensated (its completed steps were undone), or its plan is not plan_hash."
        ),
    },
)
class WorkflowRerunView(WorkersAPIView):
    """Run an ended workflow the caller owns again, from where it failed."""

    operation_id = "workflows_rerun"
    query_parameters = frozenset(WorkflowRerunQuerySerializer().fields)

    def patch(self, request: Request, workflow_id: str) -> Response:
        query = WorkflowRerunQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        info = rerun_workflow(
            checked_workflow_id(workflow_id),
            self.authority(),
            plan_hash=query.validated_data["plan_hash"],
        )
        return workflow_answer(info)
