"""How the API answers a refusal: one status and code per exception, one body shape.

Every error body is ``{"error": code, "detail": message}``. The handler is
installed on this package's views only, so the site's own DRF views keep the
site's handler.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from django_workers import exceptions as workers

#: Each django-workers exception's HTTP status; the error code is the exception's ``code``.
#: Statuses of 500 are not refusals of the request but a run's outcome or a broken
#: site: they are left to Django, which logs them, and their message is never sent.
#: A database that is away is answered 503, for the client to try again.
HTTP_STATUS: dict[type[workers.WorkersError], int] = {
    workers.InvalidTaskKey: status.HTTP_400_BAD_REQUEST,
    workers.InvalidTaskOptions: status.HTTP_400_BAD_REQUEST,
    workers.InvalidWorkflow: status.HTTP_400_BAD_REQUEST,
    workers.InvalidSchedule: status.HTTP_400_BAD_REQUEST,
    workers.TaskNotImportable: status.HTTP_400_BAD_REQUEST,
    workers.TaskNotAllowed: status.HTTP_400_BAD_REQUEST,
    workers.ArgumentsNotSerializable: status.HTTP_400_BAD_REQUEST,
    workers.ArgumentsTooLarge: status.HTTP_400_BAD_REQUEST,
    workers.AuthorizationError: status.HTTP_403_FORBIDDEN,
    workers.TaskNotFound: status.HTTP_404_NOT_FOUND,
    workers.WorkflowNotFound: status.HTTP_404_NOT_FOUND,
    workers.TaskAlreadyFinished: status.HTTP_409_CONFLICT,
    workers.WorkflowAlreadyFinished: status.HTTP_409_CONFLICT,
    workers.WorkflowCancelNarrows: status.HTTP_409_CONFLICT,
    workers.WorkflowCannotRerun: status.HTTP_409_CONFLICT,
    workers.TaskNotRetryable: status.HTTP_409_CONFLICT,
    workers.WorkflowExists: status.HTTP_409_CONFLICT,
    workers.DatabaseUnavailable: status.HTTP_503_SERVICE_UNAVAILABLE,
    workers.ResultTooLarge: status.HTTP_500_INTERNAL_SERVER_ERROR,
    workers.TaskTimeoutError: status.HTTP_500_INTERNAL_SERVER_ERROR,
    workers.TaskCancelled: status.HTTP_500_INTERNAL_SERVER_ERROR,
    workers.WorkerLost: status.HTTP_500_INTERNAL_SERVER_ERROR,
    workers.RemoteTaskError: status.HTTP_500_INTERNAL_SERVER_ERROR,
    workers.RuntimeInTransaction: status.HTTP_500_INTERNAL_SERVER_ERROR,
    workers.TasksKeepComing: status.HTTP_500_INTERNAL_SERVER_ERROR,
    workers.Retry: status.HTTP_500_INTERNAL_SERVER_ERROR,
    workers.WorkersError: status.HTTP_500_INTERNAL_SERVER_ERROR,
}

#: A hidden task or workflow and a missing one get this same detail, which never echoes the id.
NOT_FOUND_DETAIL = {
    workers.TaskNotFound: (
        "No task with this id is visible to you. Check the id returned by submit_task "
        "(it is not the key) and that you own or watch the task."
    ),
    workers.WorkflowNotFound: (
        "No workflow with this id is visible to you. Check the id (a user's workflow is "
        "<user id>::<key>; a bare key names your own) and that the workflow is yours."
    ),
}

#: Query parameters that fail validation are refused like bad paging given to the task API.
INVALID_PARAMETERS = workers.InvalidTaskOptions.code


def status_of(exc: workers.WorkersError) -> int:
    """The HTTP status of a django-workers exception (its nearest mapped class)."""
    return next(HTTP_STATUS[cls] for cls in type(exc).__mro__ if cls in HTTP_STATUS)


def error_body(code: str, detail: str) -> dict[str, str]:
    """The body of every error answer."""
    return {"error": code, "detail": detail}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Answer a refusal with its status and ``{"error", "detail"}``; None lets Django answer."""
    if isinstance(exc, workers.WorkersError):
        return _workers_answer(exc)
    response = drf_exception_handler(exc, context)
    if response is not None:
        response.data = error_body(*_drf_code_and_detail(exc))
    return response


def _workers_answer(exc: workers.WorkersError) -> Response | None:
    code = status_of(exc)
    if code == status.HTTP_500_INTERNAL_SERVER_ERROR:
        return None
    detail = NOT_FOUND_DETAIL.get(type(exc), str(exc))
    return Response(error_body(exc.code, detail), status=code)


def _drf_code_and_detail(exc: Exception) -> tuple[str, str]:
    if isinstance(exc, drf.ValidationError):
        return INVALID_PARAMETERS, _flatten(exc.detail)
    if isinstance(exc, drf.APIException):
        codes = exc.get_codes()
        return (codes if isinstance(codes, str) else str(exc.default_code)), str(exc.detail)
    # Django's own Http404 and PermissionDenied, which DRF's handler also answers.
    if isinstance(exc, Http404):
        return workers.TaskNotFound.code, NOT_FOUND_DETAIL[workers.TaskNotFound]
    return workers.AuthorizationError.code, str(exc) or str(drf.PermissionDenied.default_detail)


def _flatten(detail: Any, field: str = "") -> str:
    if isinstance(detail, dict):
        return "; ".join(_flatten(value, name) for name, value in detail.items())
    if isinstance(detail, list):
        return "; ".join(_flatten(item, field) for item in detail)
    return f"{field}: {detail}" if field else str(detail)
