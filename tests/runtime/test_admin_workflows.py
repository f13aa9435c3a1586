"""The workflow admin: who sees which workflow, its page and picture, and cancelling it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.test import Client
from django.urls import NoReverseMatch, reverse

from django_workers import Owner, System, clock
from django_workers.models import TaskRecord, WorkflowRecord
from django_workers.stores import default_store, set_watch_authorizer
from django_workers.testing import run_tasks
from django_workers.workflow_svg import colours
from django_workers.workflows import Workflow, WorkflowInfo, get_workflow_status
from tests.helpers import make_user
from tests.tasks import add, noop

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_workers_workflowrecord_changelist"


def change_url(workflow_id: str) -> str:
    return reverse("admin:django_workers_workflowrecord_change", args=[quote(workflow_id)])


def cancel_url(workflow_id: str) -> str:
    return reverse("admin:django_workers_workflowrecord_cancel", args=[quote(workflow_id)])


def task_url(task_id: str) -> str:
    return reverse("admin:django_workers_taskrecord_change", args=[quote(task_id)])


def now(workflow_id: str) -> WorkflowInfo:
    return get_workflow_status(workflow_id, System())


@dataclass
class World:
    users: dict[str, User]
    live: str  # alice's running workflow: charge completed (with an undo), ship pending
    done: str  # alice's completed workflow
    other: str  # sam's own running workflow

    def client(self, role: str) -> Client:
        client = Client()
        client.force_login(self.users[role])
        return client


def order(owner: Owner, key: str) -> str:
    """``charge`` (queue ``pay``, undone by ``noop`` on ``refunds``) then ``ship``, ``notify``."""
    wf = Workflow(key, owner)
    charge = wf.add("charge", add, args=[1, 2], queue="pay").undo(noop, queue="refunds")
    ship = wf.add("ship", add, args=[3, 4], queue="ship").after(charge)
    wf.add("notify", noop, queue="ship").after(charge, ship).always()
    return wf.submit().id


@pytest.fixture
def world() -> World:
    users = {
        "owner": make_user("alice"),
        "stranger": make_user("sam"),
        "manager": make_user("mia", manager=True),
        "superuser": make_user("root", su=True),
        "nonstaff": make_user("nick", staff=False, manager=True),
    }
    alice = Owner.for_user(users["owner"])
    live = order(alice, "order-1")
    run_tasks(queues=["pay"])
    done = Workflow("report", alice)
    done.add("sum", add, args=[2, 3], queue="reports")
    done_id = done.submit().id
    run_tasks(queues=["reports"])
    other = order(Owner.for_user(users["stranger"]), "mine")
    return World(users=users, live=live, done=done_id, other=other)


SEES_ALICE = {"owner": True, "stranger": False, "manager": True, "superuser": True}


# -- the changelist ----------------------------------------------------------------------------


@pytest.mark.parametrize("role", sorted(SEES_ALICE))
def test_changelist_shows_only_visible_workflows(world: World, role: str) -> None:
    response = world.client(role).get(reverse(CHANGELIST))
    assert response.status_code == 200
    ids = {str(w.pk) for w in response.context["cl"].result_list}
    alice = {world.live, world.done}
    assert (ids >= alice) is SEES_ALICE[role]
    if not SEES_ALICE[role]:
        assert ids == {world.other}
        body = response.content.decode()
        for workflow_id in alice:
            assert workflow_id not in body
            assert quote(workflow_id) not in body


def test_a_watcher_sees_a_shared_workflow_its_nodes_and_its_live_answer(world: World) -> None:
    watcher = make_user("wendy")  # staff, neither superuser nor manager
    set_watch_authorizer(default_store(), lambda workflow_id, watchers, user_id: True)
    wf = Workflow(
        "shared", Owner.for_user(world.users["owner"]), watchers=[Owner.for_user(watcher)]
    )
    wf.add("sum", add, args=[2, 3], queue="reports")
    shared = wf.submit().id
    client = Client()
    client.force_login(watcher)

    listed = client.get(reverse(CHANGELIST))
    assert {str(w.pk) for w in listed.context["cl"].result_list} == {shared}
    page = client.get(change_url(shared))
    assert page.status_code == 200
    assert page.context["watchers"] == [f'<span title="user {watcher.pk}">wendy</span>']
    live = reverse("admin:django_workers_workflowrecord_live", args=[quote(shared)])
    assert client.get(live).json()["state"] == "running"
    tasks = client.get(reverse("admin:django_workers_taskrecord_changelist"))
    assert {str(t.pk) for t in tasks.context["cl"].result_list} == {now(shared).nodes[0].task_id}
    assert client.get(task_url(now(shared).nodes[0].task_id)).status_code == 200
    # Only that one: alice's other workflows stay hidden, and a stranger sees none of it.
    assert client.get(change_url(world.live)).status_code == 404
    assert world.client("stranger").get(change_url(shared)).status_code == 404
    assert client.post(cancel_url(shared)).status_code == 302
    assert now(shared).state == "cancelled"


def test_non_staff_users_are_sent_to_the_login_page(world: World) -> None:
    response = world.client("nonstaff").get(reverse(CHANGELIST))
    assert response.status_code == 302
    assert "/login/" in response["Location"]
    page = world.client("nonstaff").get(change_url(world.live))
    assert page.status_code == 302


def test_search_by_id_key_and_owner(world: World) -> None:
    client = world.client("superuser")

    def found(query: str) -> set[str]:
        response = client.get(reverse(CHANGELIST), {"q": query})
        return {w.pk for w in response.context["cl"].result_list}

    assert found("order-1") == {world.live}
    assert found("report") == {world.done}
    assert found(world.other) == {world.other}
    assert found(str(world.users["stranger"].pk)) >= {world.other}


def test_stranger_search_reveals_nothing(world: World) -> None:
    client = world.client("stranger")
    response = client.get(reverse(CHANGELIST), {"q": "order-1"})
    assert list(response.context["cl"].result_list) == []
    response = client.get(reverse(CHANGELIST), {"q": str(world.users["owner"].pk)})
    assert world.live not in response.content.decode()


def test_filter_by_state_offers_every_state(world: World) -> None:
    client = world.client("owner")
    done = client.get(reverse(CHANGELIST), {"state": "completed"})
    assert [w.pk for w in done.context["cl"].result_list] == [world.done]
    running = client.get(reverse(CHANGELIST), {"state": "running"})
    assert [w.pk for w in running.context["cl"].result_list] == [world.live]
    body = running.content.decode()
    for state in ("compensating", "compensated", "compensation failed", "cancelled"):
        assert state in body


def test_filter_counts_count_only_visible_workflows(world: World) -> None:
    body = world.client("stranger").get(reverse(CHANGELIST), {"_facets": "True"}).content
    assert "running (1)" in body.decode()
    assert "completed (0)" in body.decode()


def test_changelist_shows_owner_state_and_node_counts(world: World) -> None:
    body = world.client("owner").get(reverse(CHANGELIST)).content.decode()
    assert str(world.users["owner"].pk) in body
    assert 'class="dw-state dw-state-running"' in body
    assert '<progress class="dw-nodes" value="1" max="3"' in body
    assert "1/3 ended" in body
    assert "1 waiting, 1 pending, 1 completed" in body
    assert "Cancel selected workflows without undo" in body


# -- a workflow's page -------------------------------------------------------------------------


@pytest.mark.parametrize("role", sorted(SEES_ALICE))
def test_the_page_is_404_for_who_may_not_see(world: World, role: str) -> None:
    response = world.client(role).get(change_url(world.live))
    assert response.status_code == (200 if SEES_ALICE[role] else 404)
    missing = world.client(role).get(change_url("no::such-workflow"))
    assert missing.status_code == 404
    if not SEES_ALICE[role]:
        assert response.content == missing.content
        assert world.live not in response.content.decode()


def test_an_id_no_workflow_could_have_is_404(world: World) -> None:
    client = world.client("superuser")
    for bad in ("a\x00b", "a\nb", "x" * 300):
        assert client.get(change_url(bad)).status_code == 404
        assert client.post(cancel_url(bad)).status_code == 404


def test_the_page_shows_the_workflow_and_each_node(world: World) -> None:
    body = world.client("owner").get(change_url(world.live)).content.decode()
    owner_pk = world.users["owner"].pk
    assert f"Workflow {world.live}" in body
    assert 'class="dw-state dw-state-running"' in body
    for name in ("charge", "ship", "notify"):
        assert f'<tr class="dw-node-row" data-node="{name}">' in body
        assert f'href="{task_url(f"{owner_pk}::order-1:{name}")}"' in body
    assert "tests.tasks.noop" in body  # the undo step's task
    assert "charge, ship (always)" in body
    assert "1 bytes" in body  # charge's result size, never its result
    assert 'name="_save"' not in body


def _svg(body: str) -> str:
    [svg] = re.findall(
        r'<svg xmlns="http://www.w3.org/2000/svg" class="dw-dag".*?</svg>', body, re.S
    )
    return svg


def test_the_page_draws_the_dag_with_each_node_in_its_state_colour(world: World) -> None:
    body = world.client("owner").get(change_url(world.live)).content.decode()
    svg = _svg(body)
    owner_pk = world.users["owner"].pk
    states = {"charge": "completed", "ship": "pending", "notify": "waiting"}
    for name, state in states.items():
        fill, stroke = colours(state)
        node = re.search(
            rf'<a href="([^"]+)"[^>]*><g class="dw-node dw-state-{state}" data-node="{name}"'
            rf'.*?<title>{name}: {state}.*?</title><rect [^>]*fill="{fill}" stroke="{stroke}"',
            svg,
            re.S,
        )
        assert node is not None, name
        assert node.group(1) == task_url(f"{owner_pk}::order-1:{name}")
    assert svg.count('class="dw-edge"') == 3
    assert 'data-from="charge" data-to="ship"' in svg
    assert svg.count('stroke-dasharray="5 3"') == 2  # both edges into the .always() node
    assert '<g class="dw-undo dw-state-idle" data-node="charge"' in svg
    assert "undo: idle" in svg


def test_the_page_offers_both_cancels_while_running_and_none_once_ended(world: World) -> None:
    client = world.client("owner")
    live = client.get(change_url(world.live)).content.decode()
    assert "Cancel and undo completed steps" in live
    assert "Cancel without undo" in live
    done = client.get(change_url(world.done)).content.decode()
    assert 'id="dw-cancel-form"' not in done
    assert "Cancel workflow" not in done


def test_a_workflow_without_undo_steps_offers_one_cancel(world: World) -> None:
    wf = Workflow("plain", Owner.for_user(world.users["owner"]))
    wf.add("only", noop)
    body = world.client("owner").get(change_url(wf.submit().id)).content.decode()
    assert "Cancel workflow" in body
    assert "Cancel without undo" not in body


def test_no_page_adds_edits_deletes_or_keeps_history(world: World) -> None:
    client = world.client("superuser")
    for name in ("add", "delete", "history"):
        with pytest.raises(NoReverseMatch):
            reverse(f"admin:django_workers_workflowrecord_{name}", args=[quote(world.live)])
    assert client.post(change_url(world.live), {"state": "completed"}).status_code == 405
    assert client.get(change_url(world.live).replace("/change/", "/delete/")).status_code == 404
    assert now(world.live).state == "running"


# -- the Cancel buttons ------------------------------------------------------------------------

CANCELS_ALICE = {"owner": 302, "stranger": 404, "manager": 302, "superuser": 302}


@pytest.mark.parametrize("role", sorted(CANCELS_ALICE))
def test_cancel_compensates_as_submitted(world: World, role: str) -> None:
    client = world.client(role)
    response = client.post(cancel_url(world.live))
    assert response.status_code == CANCELS_ALICE[role]
    if response.status_code == 302:
        assert response["Location"] == change_url(world.live)
        assert now(world.live).state == "compensating"
        page = client.get(response["Location"]).content.decode()
        assert "was cancelled; its completed steps are being undone" in page
        assert '<g class="dw-undo dw-state-pending" data-node="charge"' in page
    else:
        assert now(world.live).state == "running"
        assert world.live not in response.content.decode()


def test_cancel_without_undo_leaves_completed_steps_alone(world: World) -> None:
    response = world.client("owner").post(cancel_url(world.live), {"undo": "false"}, follow=True)
    assert "was cancelled without undo" in response.content.decode()
    info = now(world.live)
    assert info.state == "cancelled"
    assert info.node("charge").undo.state == "idle"  # type: ignore[union-attr]


def test_cancel_needs_post_and_csrf(world: World) -> None:
    assert world.client("owner").get(cancel_url(world.live)).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world.users["owner"])
    assert strict.post(cancel_url(world.live)).status_code == 403
    assert now(world.live).state == "running"


def test_cancel_of_an_ended_workflow_reports_it(world: World) -> None:
    response = world.client("owner").post(cancel_url(world.done), follow=True)
    assert f"Workflow {world.done} has already ended (completed)" in response.content.decode()
    assert now(world.done).state == "completed"


def test_cancel_of_a_compensating_workflow_reports_it(world: World) -> None:
    client = world.client("owner")
    client.post(cancel_url(world.live))
    response = client.post(cancel_url(world.live), {"undo": "false"}, follow=True)
    assert f"Workflow {world.live} is already being undone" in response.content.decode()
    assert now(world.live).state == "compensating"


# -- the cancel actions ------------------------------------------------------------------------


def _act(client: Client, action: str, ids: list[str]) -> list[str]:
    data = {"action": action, ACTION_CHECKBOX_NAME: ids, "index": 0}
    response = client.post(reverse(CHANGELIST), data, follow=True)
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


@pytest.mark.parametrize("role", ["owner", "manager", "superuser"])
def test_cancel_selected_reports_each_outcome(world: World, role: str) -> None:
    notes = _act(world.client(role), "cancel_selected", [world.live, world.done])
    assert notes == [
        f"Cancelled, undoing their completed steps: {world.live}.",
        f"Already ended: {world.done}.",
    ]
    assert now(world.live).state == "compensating"


def test_cancel_selected_without_undo(world: World) -> None:
    plain = Workflow("plain", Owner.for_user(world.users["owner"]))
    plain.add("only", noop)
    plain_id = plain.submit().id
    notes = _act(world.client("owner"), "cancel_selected_without_undo", [world.live, plain_id])
    assert notes == [f"Cancelled without undo: {world.live}, {plain_id}."]
    assert now(world.live).state == "cancelled"
    assert now(plain_id).state == "cancelled"


def test_cancel_selected_by_a_stranger_touches_nothing_and_names_nothing(world: World) -> None:
    notes = _act(world.client("stranger"), "cancel_selected", [world.live, world.other])
    assert notes == [
        f"Cancelled: {world.other}.",
        "1 selected workflow(s) not found or not visible to you; nothing was done.",
    ]
    assert now(world.live).state == "running"


def test_cancel_selected_across_every_page_cancels_only_what_the_user_sees(world: World) -> None:
    data = {"action": "cancel_selected", ACTION_CHECKBOX_NAME: [world.other], "index": 0}
    data["select_across"] = "1"
    world.client("stranger").post(reverse(CHANGELIST), data)
    assert now(world.other).state == "cancelled"  # nothing of it had completed
    assert now(world.live).state == "running"


def test_no_admin_page_writes_a_workflow_or_task_row_directly(world: World) -> None:
    # The admin reads rows and calls cancel_workflow; the store does every write.
    before = (WorkflowRecord.objects.count(), TaskRecord.objects.count())
    world.client("owner").post(cancel_url(world.live), {"undo": "false"})
    assert (WorkflowRecord.objects.count(), TaskRecord.objects.count()) == before
    assert WorkflowRecord.objects.get(pk=world.live).cancel_undo is False


# -- a cancel while a step runs ------------------------------------------------------------------


@pytest.fixture
def shipping(world: World) -> str:
    """Alice's live workflow with ``ship`` running (``charge`` completed, with an undo)."""
    [claimed] = default_store().claim("w-test", ["ship"], 1, clock.now())
    assert default_store().begin_runs([claimed]) == [True]
    return world.live


def _buttons(page: str) -> set[str]:
    return set(re.findall(r'<button type="submit" class="button ([^"]+)"', page))


def test_a_cancel_while_a_step_runs_shows_compensating_at_once(world: World, shipping: str) -> None:
    client = world.client("owner")
    page = client.post(cancel_url(shipping), follow=True).content.decode()
    assert f"Workflow {shipping} was cancelled; its completed steps are being undone." in page
    cell = page[page.index('class="dw-state-cell"') :].split("</td>")[0]
    assert "dw-state-compensating" in cell
    assert "Cancel asked" in cell
    # Only dropping the undo may still be asked.
    assert _buttons(page) == {"dw-cancel dw-drop-undo"}
    listed = client.get(reverse(CHANGELIST), {"state": "compensating"})
    assert [w.pk for w in listed.context["cl"].result_list] == [shipping]
    assert "dw-state-compensating" in listed.content.decode()


def test_a_cancel_without_undo_while_a_step_runs_shows_cancelling(
    world: World, shipping: str
) -> None:
    client = world.client("owner")
    page = client.post(cancel_url(shipping), {"undo": "false"}, follow=True).content.decode()
    assert "it ends once its running steps have stopped" in page
    cell = page[page.index('class="dw-state-cell"') :].split("</td>")[0]
    assert "dw-state-cancelling" in cell
    assert _buttons(page) == set()  # nothing more may be asked
    again = client.post(cancel_url(shipping), follow=True).content.decode()
    assert f"Workflow {shipping} is already being cancelled (cancelling); nothing changed." in again
    assert (now(shipping).state, now(shipping).cancel_undo) == ("cancelling", False)


def test_dropping_the_undo_of_a_pending_cancel_says_what_it_drops_and_asks_first(
    world: World, shipping: str
) -> None:
    client = world.client("owner")
    client.post(cancel_url(shipping))
    asked = client.post(cancel_url(shipping), {"undo": "false"})
    assert asked.status_code == 200
    body = asked.content.decode()
    assert "the undo step of <strong>charge</strong> (completed) will not run" in body
    assert 'name="confirm" value="drop-undo"' in body
    assert (now(shipping).state, now(shipping).cancel_undo) == ("compensating", True)
    done = client.post(cancel_url(shipping), {"undo": "false", "confirm": "drop-undo"}, follow=True)
    assert f"Workflow {shipping} was cancelled without undo" in done.content.decode()
    assert (now(shipping).state, now(shipping).cancel_undo) == ("cancelling", False)


def test_a_second_cancel_of_a_pending_cancel_changes_nothing(world: World, shipping: str) -> None:
    client = world.client("owner")
    client.post(cancel_url(shipping))
    again = client.post(cancel_url(shipping), follow=True).content.decode()
    assert (
        f"Workflow {shipping} is already being cancelled (compensating); nothing changed." in again
    )
    assert now(shipping).cancel_undo is True


def test_cancel_selected_without_undo_keeps_an_undo_already_asked_for(
    world: World, shipping: str
) -> None:
    client = world.client("owner")
    client.post(cancel_url(shipping), follow=True)
    notes = _act(client, "cancel_selected_without_undo", [shipping])
    assert notes == [
        f"Already being cancelled with undo, which was kept: {shipping}. To drop an undo, "
        "use the workflow's page (it asks you to confirm)."
    ]
    assert now(shipping).cancel_undo is True


# -- the Re-run button -------------------------------------------------------------------------


def rerun_url(workflow_id: str) -> str:
    return reverse("admin:django_workers_workflowrecord_rerun", args=[quote(workflow_id)])


@pytest.fixture
def failed(world: World) -> str:
    """Alice's workflow failed at its second step (``first`` completed, ``second`` failed)."""
    wf = Workflow("pipeline", Owner.for_user(world.users["owner"]))
    first = wf.add("first", add, args=[1, 1], queue="steps")
    wf.add("second", "tests.tasks.wf_fail", queue="steps").after(first)
    workflow_id = wf.submit().id
    run_tasks(queues=["steps"])
    assert now(workflow_id).state == "failed"
    return workflow_id


def test_only_an_ended_workflow_that_kept_its_steps_offers_a_rerun(
    world: World, failed: str
) -> None:
    client = world.client("owner")
    page = client.get(change_url(failed)).content.decode()
    assert _buttons(page) == {"dw-rerun"}
    assert f'name="plan_hash" value="{now(failed).plan_hash}"' in page
    for other in (world.live, world.done):
        assert "dw-rerun" not in client.get(change_url(other)).content.decode()


@pytest.mark.parametrize("role", sorted(CANCELS_ALICE))
def test_rerun_runs_the_failed_steps_again(world: World, failed: str, role: str) -> None:
    client = world.client(role)
    response = client.post(rerun_url(failed), {"plan_hash": now(failed).plan_hash})
    assert response.status_code == CANCELS_ALICE[role]
    info = now(failed)
    if response.status_code == 302:
        assert (info.state, info.runs) == ("running", 2)
        page = client.get(response["Location"]).content.decode()
        assert "runs again (run 2): 1 of its 2 steps run again" in page
        assert [node.state for node in info.nodes] == ["completed", "pending"]
    else:
        assert (info.state, info.runs) == ("failed", 1)


def test_rerun_of_another_plan_or_a_completed_workflow_reports_why(
    world: World, failed: str
) -> None:
    client = world.client("owner")
    response = client.post(rerun_url(failed), {"plan_hash": "0" * 64}, follow=True)
    assert "its plan is not the one with hash 000000000000" in response.content.decode()
    assert now(failed).state == "failed"
    response = client.post(rerun_url(world.done), follow=True)
    assert "it completed; there is nothing to run again" in response.content.decode()
    assert client.get(rerun_url(failed)).status_code == 405
