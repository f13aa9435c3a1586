"""The task REST API: who sees and cancels what, bad input, paging; the schema of every route.

The workflow routes have their own module (``test_rest_workflows``); their answers
are checked against the schema here, with the task routes'.
"""

from __future__ import annotations

import inspect
import json
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from jsonschema import Draft202012Validator
from rest_framework.test import APIClient

from django_workers import Owner, System, exceptions, get_task_status, submit_task
from django_workers.authority import TASK_ID_MAX_LENGTH
from django_workers.rest.errors import HTTP_STATUS, NOT_FOUND_DETAIL, status_of
from django_workers.testing import run_tasks
from django_workers.workflows import Workflow
from tests.helpers import client_for
from tests.tasks import add, noop

pytestmark = pytest.mark.django_db

API = "/workers/tasks/"
#: A key with what keys may hold and URLs make awkward: a slash, '::', a space, a '?'.
KEY = "report/2024::q1 final?"
SECRET = 1337  # the owner's result, which no one else may read

ROLES = ("owner", "watcher", "stranger", "staff", "superuser", "privileged")
SEES = {"owner", "watcher", "superuser", "privileged"}


@pytest.fixture
def users() -> dict[str, User]:
    made = {
        "owner": User.objects.create_user("owner"),
        "watcher": User.objects.create_user("watcher"),
        "stranger": User.objects.create_user("stranger"),
        "staff": User.objects.create_user("staff", is_staff=True),
        "superuser": User.objects.create_superuser("root"),
        "privileged": User.objects.create_user("operator"),
    }
    made["privileged"].user_permissions.add(Permission.objects.get(codename="manage_all_tasks"))
    return made


@pytest.fixture
def task_id(users: dict[str, User]) -> str:
    """A pending task of the owner, watched by the watcher."""
    owner, watcher = Owner.for_user(users["owner"]), Owner.for_user(users["watcher"])
    return submit_task(KEY, add, owner, args=(1, 2), watchers=[watcher])


@pytest.fixture
def done_id(users: dict[str, User]) -> str:
    """A completed task of the owner, watched by the watcher, whose result is SECRET."""
    owner, watcher = Owner.for_user(users["owner"]), Owner.for_user(users["watcher"])
    done = submit_task(
        "done", add, owner, args=(SECRET - 1, 1), watchers=[watcher], queue="reports"
    )
    run_tasks(queues=["reports"])
    return done


def url(task_id: str, action: str = "") -> str:
    return f"{API}{quote(task_id, safe='')}/{action}"


def missing_body() -> dict[str, str]:
    return {"error": "not_found", "detail": NOT_FOUND_DETAIL[exceptions.TaskNotFound]}


# -- the authorization matrix ----------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_only_owner_watchers_and_privileged_users_read_a_task(role, users, task_id):
    response = client_for(users[role]).get(url(task_id))
    if role in SEES:
        assert response.status_code == 200
        assert response.json()["id"] == task_id
    else:
        assert response.status_code == 404
        assert response.json() == client_for(users[role]).get(url("1::no-such")).json()
        assert response.json() == missing_body()


@pytest.mark.parametrize("role", ROLES)
def test_the_list_holds_only_tasks_the_caller_may_see(role, users, task_id):
    ids = [task["id"] for task in client_for(users[role]).get(API).json()["results"]]
    assert (task_id in ids) == (role in SEES)


@pytest.mark.parametrize("role", ROLES)
def test_only_owner_watchers_and_privileged_users_cancel_a_task(role, users, task_id):
    response = client_for(users[role]).patch(url(task_id, "actions/cancel"))
    status = get_task_status(task_id, System()).status
    if role in SEES:
        assert response.status_code == 200
        assert response.json()["status"] == status == "CANCELLED"
        assert response.json()["cancel_reason"] == "user"
    else:
        assert response.status_code == 404
        assert response.json() == missing_body()
        assert status == "PENDING"


@pytest.mark.parametrize("role", ROLES)
def test_cancelling_an_ended_task_is_409_only_for_those_who_see_it(role, users, done_id):
    response = client_for(users[role]).patch(url(done_id, "actions/cancel"))
    if role in SEES:
        assert response.status_code == 409
        assert response.json()["error"] == "already_finished"
    else:
        assert response.status_code == 404
        assert response.json() == missing_body()


@pytest.mark.parametrize("role", ["stranger", "staff"])
def test_a_stranger_never_reads_another_users_ids_or_results(role, users, task_id, done_id):
    client = client_for(users[role])
    bodies = [
        client.get(API),
        client.get(API, {"status": "COMPLETED"}),
        client.get(API, {"queue": "default"}),
        client.get(url(task_id)),
        client.get(url(done_id)),
        client.get(url(done_id, "actions/cancel")),
        client.patch(url(task_id, "actions/cancel")),
        client.patch(url(done_id, "actions/cancel")),
    ]
    text = "".join(response.content.decode() for response in bodies)
    for secret in (task_id, done_id, KEY, "done", str(SECRET), str(users["owner"].pk) + "::"):
        assert secret not in text


def test_the_owner_reads_the_result_and_every_field(users, done_id):
    task = client_for(users["owner"]).get(url(done_id)).json()
    assert task["result"] == SECRET
    assert task["status"] == "COMPLETED"
    assert task["owner"] == str(users["owner"].pk)
    assert str(users["watcher"].pk) in task["watchers"]
    assert task["created_at"].endswith("Z")
    assert set(task) == {
        "id", "key", "owner", "scope", "queue", "priority", "status", "progress", "attempts",
        "max_attempts", "retrying", "result", "error", "errors", "cancel_reason", "run_id",
        "created_at", "started_at", "finished_at", "run_after", "watchers", "workflow", "node",
    }  # fmt: skip


def test_an_anonymous_caller_gets_the_sites_drf_answer(task_id):
    for response in (
        client_for(None).get(API),
        client_for(None).get(url(task_id)),
        client_for(None).patch(url(task_id, "actions/cancel")),
    ):
        # Session authentication, the DRF default here, answers 403.
        assert response.status_code == 403
        assert response.json()["error"] == "not_authenticated"
    assert get_task_status(task_id, System()).status == "PENDING"


@override_settings(
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"]
    }
)
def test_a_site_that_asks_for_credentials_answers_401(task_id):
    response = client_for(None).get(url(task_id))
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Basic")
    assert response.json()["error"] == "not_authenticated"


def test_an_inactive_user_is_refused_even_as_superuser(users, task_id):
    root = users["superuser"]
    root.is_active = False
    root.save()
    assert client_for(root).get(url(task_id)).status_code == 403
    assert client_for(root).patch(url(task_id, "actions/cancel")).status_code == 403


def test_a_real_session_login_reads_the_task(users, task_id):
    client = APIClient()
    client.force_login(users["owner"])
    assert client.get(url(task_id)).json()["id"] == task_id


# -- paths and ids ---------------------------------------------------------------------------


@pytest.mark.parametrize("slash", ["", "/"])
def test_every_route_answers_with_or_without_a_trailing_slash(slash, users, task_id):
    client = client_for(users["owner"])
    assert client.get(API.rstrip("/") + slash).status_code == 200
    assert client.get(url(task_id).rstrip("/") + slash).json()["id"] == task_id
    cancelled = client.patch(url(task_id, "actions/cancel") + slash)
    assert cancelled.json()["status"] == "CANCELLED"


@pytest.mark.parametrize("safe", ["", "/", "/:"], ids=["all-encoded", "raw-slash", "raw-colons"])
def test_ids_are_read_percent_encoded_with_or_without_their_slashes(safe, users, task_id):
    assert "::" in task_id
    assert "/" in task_id
    response = client_for(users["owner"]).get(f"{API}{quote(task_id, safe=safe)}/")
    assert response.json()["id"] == task_id


def test_an_id_ending_in_the_cancel_path_is_read_by_get_and_cancelled_by_patch(users):
    owner = Owner.for_user(users["owner"])
    odd = submit_task("x/actions/cancel", add, owner, args=(1, 2))
    plain = submit_task("x", add, owner, args=(1, 2))
    client = client_for(users["owner"])
    assert client.get(f"{API}{odd}").json()["id"] == odd
    assert client.get(f"{API}{odd}/").json()["id"] == odd
    assert client.patch(f"{API}{odd}/actions/cancel").json()["id"] == odd
    assert get_task_status(plain, owner).status == "PENDING"


def test_an_id_ending_in_a_slash_takes_one_more(users):
    owner = Owner.for_user(users["owner"])
    dir_id = submit_task("folder/", add, owner, args=(1, 2))
    client = client_for(users["owner"])
    assert client.get(f"{API}{dir_id}").json() == missing_body()  # reads "<owner>::folder"
    assert client.get(f"{API}{dir_id}/").json()["id"] == dir_id
    assert client.get(f"{API}{quote(dir_id, safe='')}/").json()["id"] == dir_id
    assert client.patch(f"{API}{dir_id}/actions/cancel/").json()["id"] == dir_id


@pytest.mark.parametrize(
    "bad_id",
    [
        pytest.param("1::a%00b", id="nul"),
        pytest.param("1::a%0Ab", id="newline"),
        pytest.param("1::a%7Fb", id="delete"),
        pytest.param("x" * (TASK_ID_MAX_LENGTH + 1), id="too-long"),
    ],
)
def test_an_id_that_cannot_be_a_task_id_is_400(bad_id, users):
    client = client_for(users["owner"])
    for response in (client.get(f"{API}{bad_id}/"), client.patch(f"{API}{bad_id}/actions/cancel")):
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_key"


def test_the_longest_id_is_merely_missing(users):
    response = client_for(users["owner"]).get(f"{API}{'x' * TASK_ID_MAX_LENGTH}/")
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("post", API, 405, "method_not_allowed"),
        ("delete", "1::a/", 405, "method_not_allowed"),
        ("put", "1::a/actions/cancel", 405, "method_not_allowed"),
        ("post", "1::a/actions/cancel", 405, "method_not_allowed"),
        ("get", "1::a/actions/", 404, "not_found"),
        ("get", "1::a/actions/cancel/more", 404, "not_found"),
    ],
)
def test_wrong_methods_and_paths_answer_json(method, path, status, code, users):
    target = path if path.startswith("/") else f"{API}{path}"
    response = getattr(client_for(users["owner"]), method)(target)
    assert response.status_code == status
    assert response.json()["error"] == code


# -- the list: filters and paging --------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"status": "BOGUS"},
        {"status": "pending"},
        {"offset": "-1"},
        {"offset": "10001"},
        {"offset": "one"},
        {"limit": "0"},
        {"limit": "1001"},
        {"limit": "1.5"},
        {"queue": "a\x00b"},
        {"queue": "q" * 101},
    ],
)
def test_bad_list_parameters_are_400(params, users):
    response = client_for(users["owner"]).get(API, params)
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_options"
    assert next(iter(params)) in body["detail"]


@pytest.mark.parametrize(
    "params", [{"offset": "0"}, {"offset": "10000"}, {"limit": "1"}, {"limit": "1000"}]
)
def test_paging_bounds_are_inclusive(params, users):
    response = client_for(users["owner"]).get(API, params)
    assert response.status_code == 200
    assert response.json()["offset"] == int(params.get("offset", 0))
    assert response.json()["limit"] == int(params.get("limit", 100))


def test_the_list_pages_newest_first_then_by_id(users):
    owner = Owner.for_user(users["owner"])
    ids = [submit_task(f"k{n}", add, owner, args=(n, n)) for n in range(5)]
    client = client_for(users["owner"])
    whole = [task["id"] for task in client.get(API).json()["results"]]
    assert sorted(whole) == sorted(ids)
    pages = [client.get(API, {"offset": n, "limit": 2}).json()["results"] for n in (0, 2, 4)]
    assert [task["id"] for page in pages for task in page] == whole
    stamps = [task["created_at"] for task in client.get(API).json()["results"]]
    assert stamps == sorted(stamps, reverse=True)


def test_the_list_filters_by_status_and_queue(users, task_id, done_id):
    owner = Owner.for_user(users["owner"])
    other = submit_task("mail", add, owner, args=(1, 2), queue="emails")
    client = client_for(users["owner"])

    def ids(**params: Any) -> list[str]:
        return [task["id"] for task in client.get(API, params).json()["results"]]

    assert ids(status="COMPLETED") == [done_id]
    assert set(ids(status="PENDING")) == {task_id, other}
    assert ids(queue="emails") == [other]
    assert ids(queue="reports") == [done_id]
    assert ids(queue="nowhere") == []
    assert len(ids(status="", queue="")) == 3  # an empty value is no filter, as in a form


# -- the error mapping ---------------------------------------------------------------------------


def test_every_workers_exception_has_a_status_and_its_own_code():
    classes = [
        cls
        for _, cls in inspect.getmembers(exceptions, inspect.isclass)
        if issubclass(cls, exceptions.WorkersError)
    ]
    assert set(classes) == set(HTTP_STATUS)
    assert HTTP_STATUS[exceptions.TaskNotFound] == 404
    assert HTTP_STATUS[exceptions.TaskAlreadyFinished] == 409
    assert HTTP_STATUS[exceptions.InvalidTaskOptions] == HTTP_STATUS[exceptions.InvalidTaskKey]
    assert HTTP_STATUS[exceptions.AuthorizationError] == 403
    assert HTTP_STATUS[exceptions.DatabaseUnavailable] == 503
    assert status_of(exceptions.TaskNotFound("x")) == 404


# -- the schema ----------------------------------------------------------------------------------


@pytest.fixture
def schema() -> dict[str, Any]:
    response = APIClient().get("/workers/schema/", {"format": "json"})
    assert response.status_code == 200
    return json.loads(response.content)


def test_the_schema_describes_this_apps_routes_only(schema):
    assert schema["openapi"].startswith("3.")
    assert {(path, method) for path, item in schema["paths"].items() for method in item} == {
        ("/workers/tasks/", "get"),
        ("/workers/tasks/{task_id}/", "get"),
        ("/workers/tasks/{task_id}/actions/cancel/", "get"),
        ("/workers/tasks/{task_id}/actions/cancel/", "patch"),
        ("/workers/workflows/", "get"),
        ("/workers/workflows/{workflow_id}/", "get"),
        ("/workers/workflows/{workflow_id}/actions/cancel/", "get"),
        ("/workers/workflows/{workflow_id}/actions/cancel/", "patch"),
        ("/workers/workflows/{workflow_id}/actions/rerun/", "patch"),
    }


def _workflows(user: User) -> tuple[str, str]:
    """A running workflow of ``user`` whose first node completed, and a finished one."""
    live = Workflow("order-1", Owner.for_user(user))
    charge = live.add("charge", add, args=[1, 2], queue="pay").undo(noop)
    live.add("ship", add, args=[3, 4], queue="ship").after(charge)
    done = Workflow("order-2", Owner.for_user(user))
    done.add("charge", add, args=[5, 6], queue="pay")
    ids = live.submit().id, done.submit().id
    run_tasks(queues=["pay"])
    return ids


WORKFLOWS = "/workers/workflows/"


def test_every_documented_answer_of_every_route_validates_against_the_schema(
    schema, users, task_id, done_id
):
    owner, anonymous = client_for(users["owner"]), client_for(None)
    stranger = client_for(users["stranger"])
    flow_id, ended_flow_id = _workflows(users["owner"])
    odd_id = submit_task("x/actions/cancel", add, Owner.for_user(users["owner"]), args=(1, 2))
    flow = f"{WORKFLOWS}{quote(flow_id, safe='')}/"
    ended_flow = f"{WORKFLOWS}{quote(ended_flow_id, safe='')}/"
    list_path, detail_path = "/workers/tasks/", "/workers/tasks/{task_id}/"
    cancel_path = "/workers/tasks/{task_id}/actions/cancel/"
    flows_path, flow_path = WORKFLOWS, "/workers/workflows/{workflow_id}/"
    flow_cancel_path = "/workers/workflows/{workflow_id}/actions/cancel/"
    flow_rerun_path = "/workers/workflows/{workflow_id}/actions/rerun/"
    failed = Workflow("order-3", Owner.for_user(users["owner"]))
    failed.add("explode", "tests.tasks.wf_fail", queue="boom")
    failed_flow = f"{WORKFLOWS}{quote(failed.submit().id, safe='')}/"
    run_tasks(queues=["boom"])
    with override_settings(
        REST_FRAMEWORK={
            "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"]
        }
    ):
        asked_for_credentials = [
            (list_path, "get", anonymous.get(API)),
            (detail_path, "get", anonymous.get(url(task_id))),
            (cancel_path, "patch", anonymous.patch(url(task_id, "actions/cancel"))),
            (cancel_path, "get", anonymous.get(f"{API}{odd_id}/")),
            (flows_path, "get", anonymous.get(WORKFLOWS)),
            (flow_path, "get", anonymous.get(flow)),
            (flow_cancel_path, "patch", anonymous.patch(f"{flow}actions/cancel")),
            (flow_cancel_path, "get", anonymous.get(f"{flow}actions/cancel")),
            (flow_rerun_path, "patch", anonymous.patch(f"{failed_flow}actions/rerun")),
        ]
    xml = {"format": "xml"}
    not_acceptable = [
        (list_path, "get", owner.get(API, xml)),
        (detail_path, "get", owner.get(url(task_id), xml)),
        (cancel_path, "get", owner.get(url(task_id, "actions/cancel"), xml)),
        (cancel_path, "patch", owner.patch(f"{url(done_id, 'actions/cancel')}?format=xml")),
        (flows_path, "get", owner.get(WORKFLOWS, xml)),
        (flow_path, "get", owner.get(flow, xml)),
        (flow_cancel_path, "get", owner.get(f"{flow}actions/cancel", xml)),
        (flow_cancel_path, "patch", owner.patch(f"{flow}actions/cancel?format=xml")),
        (flow_rerun_path, "patch", owner.patch(f"{failed_flow}actions/rerun?format=xml")),
    ]
    assert {response.status_code for _path, _method, response in not_acceptable} == {406}
    answers = [
        *asked_for_credentials,
        *not_acceptable,
        (list_path, "get", owner.get(API)),
        (list_path, "get", owner.get(API, {"limit": 0})),
        (list_path, "get", anonymous.get(API)),
        (detail_path, "get", owner.get(url(task_id))),
        (detail_path, "get", owner.get(url(done_id))),
        (detail_path, "get", owner.get(f"{API}1::a%00/")),
        (detail_path, "get", anonymous.get(url(task_id))),
        (detail_path, "get", stranger.get(url(task_id))),
        (cancel_path, "patch", owner.patch(url(task_id, "actions/cancel"))),
        (cancel_path, "patch", owner.patch(f"{API}1::a%00/actions/cancel")),
        (cancel_path, "patch", anonymous.patch(url(task_id, "actions/cancel"))),
        (cancel_path, "patch", stranger.patch(url(task_id, "actions/cancel"))),
        (cancel_path, "patch", owner.patch(url(done_id, "actions/cancel"))),
        (cancel_path, "get", owner.get(f"{API}{odd_id}/")),
        (cancel_path, "get", owner.get(url(task_id, "actions/cancel"))),
        (cancel_path, "get", owner.get(f"{API}1::a%00/actions/cancel/")),
        (cancel_path, "get", anonymous.get(f"{API}{odd_id}/")),
        (cancel_path, "get", stranger.get(f"{API}{odd_id}/")),
        (flows_path, "get", owner.get(WORKFLOWS)),
        (flows_path, "get", owner.get(WORKFLOWS, {"state": "RUNNING"})),
        (flows_path, "get", anonymous.get(WORKFLOWS)),
        (flow_path, "get", owner.get(flow)),
        (flow_path, "get", owner.get(ended_flow)),
        (flow_path, "get", owner.get(f"{WORKFLOWS}1::a%00/")),
        (flow_path, "get", anonymous.get(flow)),
        (flow_path, "get", stranger.get(flow)),
        (flow_cancel_path, "get", owner.get(f"{flow}actions/cancel")),
        (flow_cancel_path, "get", anonymous.get(f"{flow}actions/cancel")),
        (flow_cancel_path, "patch", owner.patch(f"{flow}actions/cancel?undo=true")),
        (flow_cancel_path, "patch", owner.patch(f"{WORKFLOWS}1::a%00/actions/cancel")),
        (flow_cancel_path, "patch", anonymous.patch(f"{flow}actions/cancel")),
        (flow_cancel_path, "patch", stranger.patch(f"{flow}actions/cancel")),
        (flow_cancel_path, "patch", owner.patch(f"{flow}actions/cancel")),  # compensating
        (flow_cancel_path, "patch", owner.patch(f"{ended_flow}actions/cancel?undo=false")),
        (flow_rerun_path, "patch", owner.patch(f"{failed_flow}actions/rerun?plan_hash=x")),
        (flow_rerun_path, "patch", owner.patch(f"{WORKFLOWS}1::a%00/actions/rerun")),
        (flow_rerun_path, "patch", anonymous.patch(f"{failed_flow}actions/rerun")),
        (flow_rerun_path, "patch", stranger.patch(f"{failed_flow}actions/rerun")),
        (flow_rerun_path, "patch", owner.patch(f"{ended_flow}actions/rerun")),
        (flow_rerun_path, "patch", owner.patch(f"{failed_flow}actions/rerun")),
    ]
    seen = set()
    for path, method, response in answers:
        documented = schema["paths"][path][method]["responses"][str(response.status_code)]
        body_schema = documented["content"]["application/json"]["schema"]
        validator = Draft202012Validator({**body_schema, "components": schema["components"]})
        validator.validate(response.json())
        seen.add((path, method, str(response.status_code)))
    every = {
        (path, method, status)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        for status in operation["responses"]
    }
    assert seen == every
    # The answers that carry a workflow hold its nodes and their undo steps.
    assert owner.get(flow).json()["nodes"][0]["undo"]["state"] == "pending"
