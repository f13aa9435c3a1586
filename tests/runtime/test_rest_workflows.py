"""The workflow REST routes: who sees and cancels which workflow, bad input, paging, undo."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission, User

from django_workers import Owner, System, clock, exceptions
from django_workers.authority import TASK_ID_MAX_LENGTH
from django_workers.rest.errors import NOT_FOUND_DETAIL
from django_workers.stores import default_store, set_watch_authorizer
from django_workers.testing import run_tasks
from django_workers.workflows import Workflow, WorkflowInfo, get_workflow_status
from tests.helpers import client_for
from tests.tasks import add, noop

pytestmark = pytest.mark.django_db

API = "/workers/workflows/"
SECRET = 4242  # the result of the owner's finished workflow: only its size is ever answered

ROLES = ("owner", "stranger", "staff", "superuser", "privileged")
SEES = {"owner", "superuser", "privileged"}


@pytest.fixture
def users() -> dict[str, User]:
    made = {
        "owner": User.objects.create_user("owner"),
        "stranger": User.objects.create_user("stranger"),
        "staff": User.objects.create_user("staff", is_staff=True),
        "superuser": User.objects.create_superuser("root"),
        "privileged": User.objects.create_user("operator"),
    }
    made["privileged"].user_permissions.add(Permission.objects.get(codename="manage_all_tasks"))
    return made


def order(user: User, key: str, *, undo_on_cancel: bool = True) -> str:
    """Submit ``charge`` (with an undo, queue ``pay``) then ``ship`` (queue ``ship``)."""
    wf = Workflow(key, Owner.for_user(user), undo_on_cancel=undo_on_cancel)
    charge = wf.add("charge", add, args=[1, 2], queue="pay").undo(noop, queue="refunds")
    wf.add("ship", add, args=[3, 4], queue="ship").after(charge)
    return wf.submit().id


@pytest.fixture
def running(users: dict[str, User]) -> str:
    """The owner's running workflow: ``charge`` pending, ``ship`` waiting for it."""
    return order(users["owner"], "order-7")


@pytest.fixture
def charged(users: dict[str, User]) -> str:
    """The owner's running workflow whose ``charge`` completed: cancelling it would undo that."""
    workflow_id = order(users["owner"], "order-8")
    run_tasks(queues=["pay"])
    return workflow_id


@pytest.fixture
def finished(users: dict[str, User]) -> str:
    """The owner's completed workflow, whose one node returned SECRET."""
    wf = Workflow("report-1", Owner.for_user(users["owner"]))
    wf.add("sum", add, args=[SECRET - 2, 2], queue="reports")
    workflow_id = wf.submit().id
    run_tasks(queues=["reports"])
    return workflow_id


def url(workflow_id: str, action: str = "") -> str:
    return f"{API}{quote(workflow_id, safe='')}/{action}"


def now(workflow_id: str) -> WorkflowInfo:
    return get_workflow_status(workflow_id, System())


def missing_body() -> dict[str, str]:
    return {"error": "not_found", "detail": NOT_FOUND_DETAIL[exceptions.WorkflowNotFound]}


# -- the authorization matrix ----------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_only_the_owner_and_privileged_users_read_a_workflow(role, users, running):
    response = client_for(users[role]).get(url(running))
    if role in SEES:
        assert response.status_code == 200
        assert response.json()["id"] == running
    else:
        assert response.status_code == 404
        assert response.json() == missing_body()
        assert response.json() == client_for(users[role]).get(url("1::no-such")).json()


@pytest.mark.parametrize("role", ROLES)
def test_the_list_holds_only_workflows_the_caller_may_see(role, users, running, finished):
    mine = order(users[role], "their-own")
    ids = [flow["id"] for flow in client_for(users[role]).get(API).json()["results"]]
    assert mine in ids
    assert ({running, finished} <= set(ids)) == (role in SEES)
    assert ({running, finished} & set(ids) == set()) == (role not in SEES)


@pytest.mark.parametrize("role", ROLES)
def test_only_the_owner_and_privileged_users_cancel_a_workflow(role, users, running):
    response = client_for(users[role]).patch(url(running, "actions/cancel"))
    state = now(running).state
    if role in SEES:
        assert response.status_code == 200
        assert response.json()["state"] == state == "cancelled"
    else:
        assert response.status_code == 404
        assert response.json() == missing_body()
        assert state == "running"


@pytest.mark.parametrize("role", ROLES)
def test_cancelling_an_ended_workflow_is_409_only_for_those_who_see_it(role, users, finished):
    response = client_for(users[role]).patch(url(finished, "actions/cancel"))
    if role in SEES:
        assert response.status_code == 409
        assert response.json()["error"] == "already_finished"
        assert "completed" in response.json()["detail"]
    else:
        assert response.status_code == 404
        assert response.json() == missing_body()


# -- watchers ------------------------------------------------------------------------------------


@pytest.fixture
def shared(users: dict[str, User]) -> str:
    """The owner's running workflow, shared with ``staff`` as its watcher."""
    set_watch_authorizer(default_store(), lambda workflow_id, watchers, user_id: True)
    wf = Workflow(
        "shared-7", Owner.for_user(users["owner"]), watchers=[Owner.for_user(users["staff"])]
    )
    first = wf.add("charge", add, args=[1, 2], queue="pay")
    wf.add("ship", add, args=[3, 4], queue="ship").after(first)
    return wf.submit().id


def test_a_watcher_lists_reads_and_cancels_a_shared_workflow(users, shared):
    watcher = client_for(users["staff"])
    assert shared in [flow["id"] for flow in watcher.get(API).json()["results"]]
    flow = watcher.get(url(shared)).json()
    assert flow["watchers"] == [str(users["owner"].pk), str(users["staff"].pk)]
    node = flow["nodes"][0]["task_id"]
    assert watcher.get(f"/workers/tasks/{quote(node, safe='')}/").status_code == 200
    response = watcher.patch(url(shared, "actions/cancel"))
    assert response.status_code == 200
    assert response.json()["state"] == now(shared).state == "cancelled"


def test_a_third_user_gets_404_for_a_shared_workflow_and_its_nodes(users, shared):
    stranger = client_for(users["stranger"])
    assert shared not in [flow["id"] for flow in stranger.get(API).json()["results"]]
    assert stranger.get(url(shared)).json() == missing_body()
    response = stranger.patch(url(shared, "actions/cancel"))
    assert response.status_code == 404
    assert response.json() == missing_body()
    node = now(shared).nodes[0].task_id
    assert stranger.get(f"/workers/tasks/{quote(node, safe='')}/").status_code == 404
    assert now(shared).state == "running"


def test_a_watcher_reads_a_shared_system_workflow_by_its_key(users):
    wf = Workflow("nightly", System(), watchers=[Owner.for_user(users["stranger"])])
    wf.add("only", noop)
    wf.submit()
    assert client_for(users["stranger"]).get(f"{API}nightly/").json()["owner"] is None
    assert client_for(users["owner"]).get(f"{API}nightly/").status_code == 404


@pytest.mark.parametrize("role", ["stranger", "staff"])
def test_a_stranger_never_reads_another_users_ids_or_results(role, users, running, finished):
    client = client_for(users[role])
    answers = [
        client.get(API),
        client.get(API, {"state": "completed"}),
        client.get(url(running)),
        client.get(url(finished)),
        client.patch(url(running, "actions/cancel")),
        client.patch(url(finished, "actions/cancel"), {"undo": "false"}),
        client.patch(f"{url(finished, 'actions/cancel')}?undo=false"),
    ]
    text = "".join(response.content.decode() for response in answers)
    for secret in (running, finished, "order-7", "report-1", "charge", f"{users['owner'].pk}::"):
        assert secret not in text
    assert now(running).state == "running"


def test_an_anonymous_caller_gets_the_sites_drf_answer(running):
    for response in (
        client_for(None).get(API),
        client_for(None).get(url(running)),
        client_for(None).patch(url(running, "actions/cancel")),
    ):
        assert response.status_code == 403
        assert response.json()["error"] == "not_authenticated"
    assert now(running).state == "running"


def test_an_inactive_superuser_is_refused(users, running):
    root = users["superuser"]
    root.is_active = False
    root.save()
    assert client_for(root).get(url(running)).status_code == 403
    assert client_for(root).patch(url(running, "actions/cancel")).status_code == 403
    assert now(running).state == "running"


# -- what a workflow answers -------------------------------------------------------------------


def test_a_workflow_answers_its_nodes_deps_tasks_and_undo_steps(users, charged):
    flow = client_for(users["owner"]).get(url(charged)).json()
    assert set(flow) == {
        "id", "key", "owner", "state", "fail_fast", "undo_on_cancel", "plan_hash",
        "created_at", "finished_at", "runs", "cancel_reason", "deadline_at", "watchers",
        "nodes",
    }  # fmt: skip
    assert (flow["runs"], flow["cancel_reason"], flow["deadline_at"]) == (1, None, None)
    assert flow["key"] == "order-8"
    assert flow["owner"] == str(users["owner"].pk)
    assert flow["watchers"] == [str(users["owner"].pk)]
    assert flow["state"] == "running"
    assert flow["undo_on_cancel"] is True
    assert flow["finished_at"] is None
    assert flow["created_at"].endswith("Z")
    charge, ship = flow["nodes"]
    assert charge == {
        "name": "charge",
        "state": "completed",
        "deps": [],
        "always": False,
        "queue": "pay",
        "task_id": f"{users['owner'].pk}::order-8:charge",
        "reason": None,
        "result_size": 1,
        "undo": {
            "state": "idle",
            "task_path": "tests.tasks.noop",
            "queue": "refunds",
            "task_id": None,
            "reason": None,
        },
    }
    assert ship["state"] == "pending"
    assert ship["deps"] == ["charge"]
    assert ship["undo"] is None


def test_a_finished_workflow_answers_its_result_size_never_its_result(users, finished):
    flow = client_for(users["owner"]).get(url(finished)).json()
    assert flow["state"] == "completed"
    assert flow["finished_at"] is not None
    [node] = flow["nodes"]
    assert node["result_size"] == len(str(SECRET))
    assert str(SECRET) not in str(flow)


def test_a_failed_node_answers_its_reason(users):
    wf = Workflow("broken", Owner.for_user(users["owner"]))
    wf.add("explode", "tests.tasks.wf_fail")
    workflow_id = wf.submit().id
    run_tasks()
    flow = client_for(users["owner"]).get(url(workflow_id)).json()
    assert flow["state"] == "failed"
    assert flow["nodes"][0]["state"] == "failed"
    assert flow["nodes"][0]["reason"] == "node failed"


# -- cancelling and undo -----------------------------------------------------------------------


def test_a_cancel_without_the_undo_parameter_compensates_as_submitted(users, charged):
    flow = client_for(users["owner"]).patch(url(charged, "actions/cancel")).json()
    assert flow["state"] == "compensating"
    assert [node["state"] for node in flow["nodes"]] == ["completed", "cancelled"]
    assert flow["nodes"][0]["undo"]["state"] == "pending"
    assert flow["nodes"][0]["undo"]["task_id"] == f"{users['owner'].pk}::order-8:charge:undo"
    run_tasks(queues=["refunds"])
    assert now(charged).state == "compensated"


def test_undo_false_cancels_without_compensation(users, charged):
    response = client_for(users["owner"]).patch(f"{url(charged, 'actions/cancel')}?undo=false")
    assert response.status_code == 200
    flow = response.json()
    assert flow["state"] == "cancelled"
    assert flow["nodes"][0]["undo"]["state"] == "idle"
    assert now(charged).state == "cancelled"


@pytest.mark.parametrize("value", ["true", "True", "1"])
def test_undo_true_is_400_and_cancels_nothing(value, users, charged):
    response = client_for(users["owner"]).patch(f"{url(charged, 'actions/cancel')}?undo={value}")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_options"
    assert "undo=true is refused" in body["detail"]
    assert "undo=false" in body["detail"]
    assert now(charged).state == "running"


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_an_undo_that_is_not_a_boolean_is_400(value, users, running):
    response = client_for(users["owner"]).patch(f"{url(running, 'actions/cancel')}?undo={value}")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_options"
    assert response.json()["detail"].startswith("undo:")
    assert now(running).state == "running"


def test_an_empty_undo_is_the_default(users, charged):
    response = client_for(users["owner"]).patch(f"{url(charged, 'actions/cancel')}?undo=")
    assert response.json()["state"] == "compensating"


def test_undo_false_on_a_workflow_without_undo_on_cancel_is_a_plain_cancel(users):
    workflow_id = order(users["owner"], "order-9", undo_on_cancel=False)
    run_tasks(queues=["pay"])
    client = client_for(users["owner"])
    assert client.patch(f"{url(workflow_id, 'actions/cancel')}?undo=true").status_code == 400
    flow = client.patch(f"{url(workflow_id, 'actions/cancel')}?undo=false").json()
    assert flow["state"] == "cancelled"
    assert flow["undo_on_cancel"] is False


def test_a_compensating_workflow_cannot_be_cancelled_again(users, charged):
    client = client_for(users["owner"])
    assert client.patch(url(charged, "actions/cancel")).json()["state"] == "compensating"
    again = client.patch(url(charged, "actions/cancel"))
    assert again.status_code == 409
    assert again.json()["error"] == "already_finished"
    assert "compensating" in again.json()["detail"]


# -- paths and ids ---------------------------------------------------------------------------


@pytest.mark.parametrize("slash", ["", "/"])
def test_every_route_answers_with_or_without_a_trailing_slash(slash, users, running):
    client = client_for(users["owner"])
    assert client.get(API.rstrip("/") + slash).status_code == 200
    assert client.get(url(running).rstrip("/") + slash).json()["id"] == running
    cancelled = client.patch(url(running, "actions/cancel").rstrip("/") + slash)
    assert cancelled.json()["state"] == "cancelled"


@pytest.mark.parametrize("safe", ["", ":"], ids=["encoded", "raw-colons"])
def test_ids_are_read_percent_encoded_or_not(safe, users, running):
    assert "::" in running
    response = client_for(users["owner"]).get(f"{API}{quote(running, safe=safe)}/")
    assert response.json()["id"] == running


def test_a_bare_key_names_the_callers_own_workflow(users, running):
    assert client_for(users["owner"]).get(f"{API}order-7/").json()["id"] == running
    stranger = client_for(users["stranger"]).get(f"{API}order-7/")
    assert stranger.json() == missing_body()
    assert client_for(users["owner"]).patch(f"{API}order-7/actions/cancel").status_code == 200


def test_a_privileged_user_reads_a_system_workflow_by_its_key(users):
    wf = Workflow("nightly", System())
    wf.add("only", noop)
    wf.submit()
    assert client_for(users["privileged"]).get(f"{API}nightly/").json()["owner"] is None
    assert client_for(users["owner"]).get(f"{API}nightly/").status_code == 404


@pytest.mark.parametrize(
    "bad_id",
    [
        pytest.param("1::a%00b", id="nul"),
        pytest.param("1::a%0Ab", id="newline"),
        pytest.param("1::a%7Fb", id="delete"),
        pytest.param("x" * (TASK_ID_MAX_LENGTH + 1), id="too-long"),
    ],
)
def test_an_id_that_cannot_be_a_workflow_id_is_400(bad_id, users):
    client = client_for(users["owner"])
    for response in (client.get(f"{API}{bad_id}/"), client.patch(f"{API}{bad_id}/actions/cancel")):
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_key"
        assert "workflow id" in response.json()["detail"]


def test_the_longest_id_is_merely_missing(users):
    response = client_for(users["owner"]).get(f"{API}{'x' * TASK_ID_MAX_LENGTH}/")
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("post", API, 405, "method_not_allowed"),
        ("delete", "1::a/", 405, "method_not_allowed"),
        ("patch", "1::a/", 405, "method_not_allowed"),
        ("get", "1::a/actions/cancel", 405, "method_not_allowed"),
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


# -- the list: filter and paging ---------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"state": "BOGUS"},
        {"state": "RUNNING"},
        {"state": "pending"},
        {"offset": "-1"},
        {"offset": "10001"},
        {"offset": "one"},
        {"limit": "0"},
        {"limit": "1001"},
        {"limit": "1.5"},
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
    ids = [order(users["owner"], f"k{n}") for n in range(5)]
    client = client_for(users["owner"])
    whole = [flow["id"] for flow in client.get(API).json()["results"]]
    assert sorted(whole) == sorted(ids)
    pages = [client.get(API, {"offset": n, "limit": 2}).json()["results"] for n in (0, 2, 4)]
    assert [flow["id"] for page in pages for flow in page] == whole
    stamps = [(flow["created_at"], flow["id"]) for flow in client.get(API).json()["results"]]
    assert stamps == sorted(stamps, reverse=True)


def test_the_list_filters_by_state(users, running, finished):
    client = client_for(users["owner"])

    def ids(**params: Any) -> list[str]:
        return [flow["id"] for flow in client.get(API, params).json()["results"]]

    assert ids(state="running") == [running]
    assert ids(state="completed") == [finished]
    assert ids(state="compensated") == []
    assert set(ids(state="")) == {running, finished}  # an empty value is no filter


# -- a cancel while a node runs ---------------------------------------------------------------


@pytest.fixture
def shipping(users: dict[str, User], charged: str) -> str:
    """The owner's workflow whose ``charge`` completed and whose ``ship`` runs now."""
    [claimed] = default_store().claim("w-test", ["ship"], 1, clock.now())
    assert default_store().begin_runs([claimed]) == [True]
    return charged


def test_a_cancel_while_a_node_runs_shows_compensating_at_once(users, shipping):
    flow = client_for(users["owner"]).patch(url(shipping, "actions/cancel")).json()
    assert flow["state"] == "compensating"
    assert [node["state"] for node in flow["nodes"]] == ["completed", "running"]
    assert client_for(users["owner"]).get(url(shipping)).json()["state"] == "compensating"


def test_a_cancel_without_undo_while_a_node_runs_shows_cancelling(users, shipping):
    client = client_for(users["owner"])
    flow = client.patch(f"{url(shipping, 'actions/cancel')}?undo=false").json()
    assert flow["state"] == "cancelling"
    again = client.patch(url(shipping, "actions/cancel"))
    assert (again.status_code, again.json()["state"]) == (200, "cancelling")
    listed = client.get(API, {"state": "cancelling"}).json()["results"]
    assert [w["id"] for w in listed] == [shipping]
    assert client.get(API, {"state": "running"}).json()["results"] == []


def test_dropping_the_undo_of_a_pending_cancel_is_409_unless_asked_for(users, shipping):
    client = client_for(users["owner"])
    assert client.patch(url(shipping, "actions/cancel")).json()["state"] == "compensating"
    narrowing = client.patch(f"{url(shipping, 'actions/cancel')}?undo=false")
    assert narrowing.status_code == 409
    body = narrowing.json()
    assert body["error"] == "cancel_narrows"
    assert "charge" in body["detail"]  # what it would drop
    assert now(shipping).state == "compensating"
    dropped = client.patch(f"{url(shipping, 'actions/cancel')}?undo=false&drop_undo=true")
    assert (dropped.status_code, dropped.json()["state"]) == (200, "cancelling")


# -- query parameters, formats and methods -------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "query", "named"),
    [
        (API, "status=running", "'status'"),  # the task list's filter, not this one's
        (API, "state=running&state=failed", "'state'"),
        (API, "limit=5&limit=6", "'limit'"),
        ("/workers/tasks/", "status=PENDING&status=FAILED", "'status'"),
        ("/workers/tasks/", "state=RUNNING", "'state'"),
    ],
)
def test_an_unknown_or_repeated_query_parameter_is_400_naming_it(users, path, query, named):
    response = client_for(users["owner"]).get(f"{path}?{query}")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_options"
    assert named in response.json()["detail"]


def test_a_read_takes_no_query_parameter_and_a_cancel_only_its_own(users, running):
    client = client_for(users["owner"])
    assert client.get(f"{url(running)}?state=running").status_code == 400
    refused = client.patch(f"{url(running, 'actions/cancel')}?undoo=false")
    assert (refused.status_code, now(running).state) == (400, "running")
    assert client.get(f"{url(running)}?format=json").status_code == 200


def test_an_unknown_format_is_406_not_404(users, running):
    for response in (
        client_for(users["owner"]).get(API, {"format": "xml"}),
        client_for(users["owner"]).get(url(running), {"format": "xml"}),
    ):
        assert response.status_code == 406
        assert response.json()["error"] == "not_acceptable"
        assert "'xml'" in response.json()["detail"]


@pytest.mark.parametrize("kind", ["task", "workflow"])
def test_get_on_a_cancel_url_is_405_allowing_patch(users, running, kind):
    path = url(running, "actions/cancel")
    if kind == "task":
        path = f"/workers/tasks/{quote(now(running).nodes[0].task_id, safe='')}/actions/cancel"
    response = client_for(users["owner"]).get(path)
    assert response.status_code == 405
    assert response["Allow"] == "PATCH, OPTIONS"
    assert response.json()["error"] == "method_not_allowed"
    assert "PATCH" in response.json()["detail"]
    assert now(running).state == "running"


# -- re-running and deadlines ------------------------------------------------------------------


@pytest.fixture
def failed(users: dict[str, User]) -> str:
    """The owner's workflow failed at its second step: ``first`` completed, ``second`` failed."""
    wf = Workflow("pipeline-1", Owner.for_user(users["owner"]))
    first = wf.add("first", add, args=[1, 1], queue="steps")
    wf.add("second", "tests.tasks.wf_fail", queue="steps").after(first)
    workflow_id = wf.submit().id
    run_tasks(queues=["steps"])
    assert now(workflow_id).state == "failed"
    return workflow_id


@pytest.mark.parametrize("role", ROLES)
def test_only_the_owner_and_privileged_users_rerun_a_workflow(role, users, failed):
    response = client_for(users[role]).patch(url(failed, "actions/rerun"))
    after = now(failed)
    if role in SEES:
        assert response.status_code == 200
        flow = response.json()
        assert (flow["state"], flow["runs"]) == ("running", 2)
        assert [node["state"] for node in flow["nodes"]] == ["completed", "pending"]
    else:
        assert response.status_code == 404
        assert response.json() == missing_body()
        assert (after.state, after.runs) == ("failed", 1)


def test_a_rerun_names_the_plan_it_read(users, failed):
    client = client_for(users["owner"])
    other = client.patch(url(failed, "actions/rerun"), QUERY_STRING="plan_hash=" + "0" * 64)
    assert other.status_code == 409
    assert other.json()["error"] == "cannot_rerun"
    assert now(failed).state == "failed"
    bad = client.patch(url(failed, "actions/rerun"), QUERY_STRING="plan_hash=nothex")
    assert bad.status_code == 400
    assert "64 hex digits" in str(bad.json())
    same = client.patch(
        url(failed, "actions/rerun"), QUERY_STRING=f"plan_hash={now(failed).plan_hash}"
    )
    assert same.status_code == 200


def test_a_running_or_compensated_workflow_is_409_and_says_why(users, running, charged):
    client = client_for(users["owner"])
    response = client.patch(url(running, "actions/rerun"))
    assert response.status_code == 409
    assert "it is running" in response.json()["detail"]
    client.patch(url(charged, "actions/cancel"))
    run_tasks(queues=["refunds"])
    assert now(charged).state == "compensated"
    response = client.patch(url(charged, "actions/rerun"))
    assert response.status_code == 409
    assert response.json()["error"] == "cannot_rerun"
    assert "undone" in response.json()["detail"]


def test_a_deadline_shows_and_its_cancel_answers_its_reason(users):
    wf = Workflow("timed", Owner.for_user(users["owner"]), deadline=60)
    wf.add("step", add, args=[1, 2], queue="timed")
    workflow_id = wf.submit().id
    flow = client_for(users["owner"]).get(url(workflow_id)).json()
    assert flow["deadline_at"] is not None
    store = default_store()
    assert store.cancel_overdue_workflows(now(workflow_id).deadline_at) == [workflow_id]
    flow = client_for(users["owner"]).get(url(workflow_id)).json()
    assert (flow["state"], flow["cancel_reason"]) == ("cancelled", "deadline")
    assert flow["nodes"][0]["reason"] == "Cancelled by its workflow's deadline"
