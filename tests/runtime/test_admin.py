"""The admin pages: who sees which task, who cancels it, and what each page shows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_workers import (
    CancelReason,
    Owner,
    System,
    TaskStatus,
    cancel_task,
    get_task_status,
    submit_task,
)
from django_workers.admin.tasks import format_seconds, progress_bar, task_duration
from django_workers.authority import owner_of
from django_workers.models import TaskRecord, WorkerProcess
from django_workers.stores import default_store
from django_workers.web_authority import authority_for_user
from django_workers.workflows import Workflow, get_workflow_status
from tests.helpers import end_record, make_user
from tests.tasks import add

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_workers_taskrecord_changelist"
SECRET = "alice-only-result-7f3a"


def change_url(task_id: str) -> str:
    return reverse("admin:django_workers_taskrecord_change", args=[quote(task_id)])


def cancel_url(task_id: str) -> str:
    return reverse("admin:django_workers_taskrecord_cancel", args=[quote(task_id)])


@dataclass
class World:
    users: dict[str, User]
    done: str  # alice's COMPLETED task, watched by wendy, with a secret result
    live: str  # alice's PENDING task, watched by wendy
    other: str  # sam's own PENDING task

    def client(self, role: str) -> Client:
        client = Client()
        client.force_login(self.users[role])
        return client


@pytest.fixture
def world() -> World:
    users = {
        "owner": make_user("alice"),
        "watcher": make_user("wendy"),
        "stranger": make_user("sam"),
        "manager": make_user("mia", manager=True),
        "superuser": make_user("root", su=True),
        "nonstaff": make_user("nick", staff=False, manager=True),
    }
    alice = Owner.for_user(users["owner"])
    wendy = Owner.for_user(users["watcher"])
    done = submit_task("report", "tests.tasks.add", alice, args=[1, 2], watchers=[wendy])
    end_record(default_store(), done, result={"secret": SECRET})
    live = submit_task("export", "tests.tasks.add", alice, args=[3, 4], watchers=[wendy])
    other = submit_task("mine", "tests.tasks.add", Owner.for_user(users["stranger"]))
    return World(users=users, done=done, live=live, other=other)


# -- the one authority function --------------------------------------------------------------


def test_authority_is_system_only_for_holders_of_manage_all_tasks(world: World) -> None:
    assert authority_for_user(world.users["superuser"]) == System()
    assert authority_for_user(world.users["manager"]) == System()
    owner = world.users["owner"]
    assert authority_for_user(owner) == Owner(str(owner.pk))


# -- the changelist ----------------------------------------------------------------------------

SEES_ALICE = {"owner": True, "watcher": True, "stranger": False, "manager": True, "superuser": True}


@pytest.mark.parametrize("role", sorted(SEES_ALICE))
def test_changelist_shows_only_visible_tasks(world: World, role: str) -> None:
    response = world.client(role).get(reverse(CHANGELIST))
    assert response.status_code == 200
    ids = {str(t.pk) for t in response.context["cl"].result_list}
    alice = {world.done, world.live}
    assert (ids >= alice) is SEES_ALICE[role]
    if not SEES_ALICE[role]:
        assert ids == {world.other}
        body = response.content.decode()
        for task_id in alice:
            assert task_id not in body
            assert quote(task_id) not in body
        assert SECRET not in body


def test_non_staff_users_are_sent_to_the_login_page(world: World) -> None:
    response = world.client("nonstaff").get(reverse(CHANGELIST))
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_stranger_search_and_filters_reveal_nothing(world: World) -> None:
    client = world.client("stranger")
    url = reverse(CHANGELIST)
    response = client.get(url, {"q": "report"})
    assert list(response.context["cl"].result_list) == []
    response = client.get(url, {"q": str(world.users["owner"].pk)})
    assert world.done not in response.content.decode()
    queues = client.get(url).context["cl"].filter_specs[1].lookup_choices
    assert list(queues) == ["default"]


def test_search_by_key_and_filter_by_status(world: World) -> None:
    client = world.client("owner")
    by_key = client.get(reverse(CHANGELIST), {"q": "export"}).context["cl"].result_list
    assert [t.pk for t in by_key] == [world.live]
    done = client.get(reverse(CHANGELIST), {"status__exact": "COMPLETED"})
    assert [t.pk for t in done.context["cl"].result_list] == [world.done]


def test_changelist_shows_progress_bar_owner_and_duration(world: World) -> None:
    body = world.client("owner").get(reverse(CHANGELIST)).content.decode()
    assert '<progress class="dw-progress" value="0" max="100"' in body
    assert str(world.users["owner"].pk) in body
    assert "Cancel selected tasks" in body


# -- the change page ---------------------------------------------------------------------------


@pytest.mark.parametrize("role", sorted(SEES_ALICE))
def test_change_page_is_404_for_who_may_not_see(world: World, role: str) -> None:
    response = world.client(role).get(change_url(world.done))
    expected = 200 if SEES_ALICE[role] else 404
    assert response.status_code == expected
    body = response.content.decode()
    assert (SECRET in body) is SEES_ALICE[role]
    missing = world.client(role).get(change_url("no::such-task"))
    assert missing.status_code == 404
    if not SEES_ALICE[role]:
        assert body == missing.content.decode().replace("no::such-task", world.done)
        history = world.client(role).get(change_url(world.done).replace("/change/", "/history/"))
        assert history.status_code == 404


def test_change_page_is_read_only_and_shows_everything(world: World) -> None:
    response = world.client("owner").get(change_url(world.done))
    body = response.content.decode()
    assert SECRET in body
    assert str(world.users["watcher"].pk) in body  # the watchers
    assert "tests.tasks.add" in body
    assert 'name="_save"' not in body
    assert "Cancel task" not in body  # ended: nothing to cancel
    assert "Cancel task" in world.client("owner").get(change_url(world.live)).content.decode()


def test_change_page_shows_error_traceback_and_cancel_reason(world: World) -> None:
    owner = Owner.for_user(world.users["owner"])
    failed = submit_task("broken", "tests.tasks.fail", owner)
    error = {"type": "builtins.ValueError", "message": "bad <input>", "traceback": "Trace line 1"}
    end_record(default_store(), failed, TaskStatus.FAILED, error=error)
    body = world.client("owner").get(change_url(failed)).content.decode()
    assert "builtins.ValueError" in body
    assert "bad &lt;input&gt;" in body
    assert "Trace line 1" in body
    cancel_task(world.live, owner)
    assert "USER" in world.client("owner").get(change_url(world.live)).content.decode().upper()


def test_earlier_errors_are_markup_and_leave_out_the_last_attempt(world: World) -> None:
    owner = Owner.for_user(world.users["owner"])
    failed = submit_task("twice-broken", "tests.tasks.fail", owner)
    first = {"type": "builtins.KeyError", "message": "first <try>", "traceback": "T1"}
    last = {"type": "builtins.ValueError", "message": "second try", "traceback": "T2"}
    end_record(default_store(), failed, TaskStatus.FAILED, error=last, errors=[first, last])
    body = world.client("owner").get(change_url(failed)).content.decode()
    earlier = body[body.index("field-errors_display") :]
    earlier = earlier[: earlier.index("</div>\n")]
    assert "<strong>builtins.KeyError</strong>: first &lt;try&gt;<pre>T1</pre>" in earlier
    assert "&lt;strong&gt;" not in earlier  # markup, not escaped markup
    assert "builtins.ValueError" not in earlier  # the last attempt is the error field's
    assert body.count("builtins.ValueError") == 1


def test_write_views_are_refused(world: World) -> None:
    client = world.client("superuser")
    add = reverse("admin:django_workers_taskrecord_add")
    assert client.get(add).status_code == 403
    delete = change_url(world.done).replace("/change/", "/delete/")
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert client.post(change_url(world.live), {"status": "COMPLETED"}).status_code == 403
    assert get_task_status(world.live, System()).status == TaskStatus.PENDING


# -- the Cancel button -------------------------------------------------------------------------

CANCELS_ALICE = {"owner": 302, "watcher": 302, "stranger": 404, "manager": 302, "superuser": 302}


@pytest.mark.parametrize("role", sorted(CANCELS_ALICE))
def test_cancel_button(world: World, role: str) -> None:
    client = world.client(role)
    response = client.post(cancel_url(world.live))
    assert response.status_code == CANCELS_ALICE[role]
    status = get_task_status(world.live, System()).status
    if response.status_code == 302:
        assert response["Location"] == change_url(world.live)
        assert status == TaskStatus.CANCELLED
        page = client.get(response["Location"])
        assert "was cancelled" in page.content.decode()
    else:
        assert status == TaskStatus.PENDING
        assert world.live not in response.content.decode()


def test_cancel_button_needs_post_and_csrf(world: World) -> None:
    client = world.client("owner")
    assert client.get(cancel_url(world.live)).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world.users["owner"])
    assert strict.post(cancel_url(world.live)).status_code == 403
    assert get_task_status(world.live, System()).status == TaskStatus.PENDING


def test_cancel_button_on_an_ended_task_reports_it(world: World) -> None:
    response = world.client("owner").post(cancel_url(world.done), follow=True)
    assert "has already ended" in response.content.decode()
    assert get_task_status(world.done, System()).status == TaskStatus.COMPLETED


def test_cancel_button_for_a_missing_task_is_404(world: World) -> None:
    assert world.client("superuser").post(cancel_url("nobody::nothing")).status_code == 404


@pytest.mark.parametrize("bad", ["a\x00b", "a\nb", "x" * 300], ids=["nul", "newline", "long"])
def test_an_id_no_task_could_have_is_404_or_counted_as_not_visible(world: World, bad: str) -> None:
    client = world.client("superuser")
    assert client.get(change_url(bad)).status_code == 404
    assert client.get(change_url(bad).replace("/change/", "/history/")).status_code == 404
    assert client.post(cancel_url(bad)).status_code == 404
    notes = _cancel_selected(client, [bad])
    assert notes == ["1 selected task(s) not found or not visible to you; nothing was done."]


# -- the "Cancel selected" action --------------------------------------------------------------


def _cancel_selected(client: Client, ids: list[str]) -> list[str]:
    data = {"action": "cancel_selected", ACTION_CHECKBOX_NAME: ids, "index": 0}
    response = client.post(reverse(CHANGELIST), data, follow=True)
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


@pytest.mark.parametrize("role", ["owner", "watcher", "manager", "superuser"])
def test_cancel_selected_reports_each_outcome(world: World, role: str) -> None:
    notes = _cancel_selected(world.client(role), [world.live, world.done])
    assert notes[0] == f"Cancelled: {world.live}."
    assert notes[1] == f"Already ended: {world.done}."
    assert get_task_status(world.live, System()).status == TaskStatus.CANCELLED


def test_cancel_selected_by_a_stranger_touches_nothing_and_names_nothing(world: World) -> None:
    notes = _cancel_selected(world.client("stranger"), [world.live, world.other])
    assert notes == [
        f"Cancelled: {world.other}.",
        "1 selected task(s) not found or not visible to you; nothing was done.",
    ]
    assert get_task_status(world.live, System()).status == TaskStatus.PENDING


def test_cancel_selected_with_only_hidden_ids_does_nothing(world: World) -> None:
    notes = _cancel_selected(world.client("stranger"), [world.live])
    assert all(world.live not in n for n in notes)
    assert get_task_status(world.live, System()).status == TaskStatus.PENDING


def test_no_admin_page_writes_a_task_row_directly(world: World) -> None:
    # Cancelling is the only change, and it ends the task as cancel_task does.
    world.client("owner").post(cancel_url(world.live))
    record = TaskRecord.objects.get(pk=world.live)
    assert record.cancel_reason == CancelReason.USER
    assert owner_of(record.pk) == Owner(str(world.users["owner"].pk))


# -- rendering helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("progress", "shown"), [(0.0, 'value="0"'), (42.5, 'value="42.5"'), (150.0, 'value="100"')]
)
def test_progress_bar(progress: float, shown: str) -> None:
    assert shown in progress_bar(progress)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250 ms"), (4.25, "4.2 s"), (185, "3 min 5 s"), (7800, "2 h 10 min")],
)
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_duration_runs_until_now_then_until_the_end(world: World) -> None:
    record = TaskRecord.objects.get(pk=world.done)
    assert record.started_at is not None
    assert record.finished_at is not None
    assert task_duration(record.started_at, record.finished_at) == (
        record.finished_at - record.started_at
    )
    running = task_duration(record.started_at - timedelta(seconds=60), None)
    assert running is not None
    assert running >= timedelta(seconds=60)
    assert task_duration(None, None) is None


# -- the worker processes page -----------------------------------------------------------------

WORKERS = "admin:django_workers_workerprocess_changelist"


def test_worker_page_shows_each_runtime_and_its_lease(world: World) -> None:
    from django_workers import clock

    now = clock.now()
    WorkerProcess.objects.create(
        id="w-live", host="alpha", pid=111, queues=["default"], concurrency=4, heartbeat_at=now
    )
    WorkerProcess.objects.create(
        id="w-dead", host="beta", pid=222, heartbeat_at=now - timedelta(minutes=5)
    )
    body = world.client("superuser").get(reverse(WORKERS)).content.decode()
    assert "alpha" in body
    assert "111" in body
    assert "beta" in body
    assert "222" in body
    assert body.count("dw-stale") == 1
    assert "live" in body
    assert "<strong>stale</strong>" in body


def test_worker_page_counts_running_tasks(world: World) -> None:
    from django_workers import clock

    WorkerProcess.objects.create(id="w-run", host="gamma", pid=333, heartbeat_at=clock.now())
    store = default_store()
    [claimed] = store.claim("w-run", ["default"], 1, clock.now())
    assert claimed.worker_id == "w-run"
    response = world.client("superuser").get(reverse(WORKERS))
    [state] = response.context["workers"]
    assert state.running == 1
    assert not state.stale


def test_worker_page_needs_the_view_permission(world: World) -> None:
    assert world.client("stranger").get(reverse(WORKERS)).status_code == 403
    assert world.client("superuser").get(reverse(WORKERS)).status_code == 200
    detail = reverse(WORKERS) + "w-live/change/"
    assert world.client("superuser").get(detail).status_code == 404


def test_filter_counts_count_only_visible_tasks(world: World) -> None:
    response = world.client("stranger").get(reverse(CHANGELIST), {"_facets": "True"})
    body = response.content.decode()
    assert "Pending (1)" in body
    assert "Completed (0)" in body


# -- owners, watchers, filters and labels ------------------------------------------------------


def _user_url(user: User) -> str:
    return reverse("admin:auth_user_change", args=[user.pk])


def test_owner_is_shown_by_name_linked_for_who_may_open_users(world: World) -> None:
    alice = world.users["owner"]
    linked = f'<a href="{_user_url(alice)}" title="user {alice.pk}">alice</a>'
    for url in (reverse(CHANGELIST), change_url(world.done)):
        assert linked in world.client("superuser").get(url).content.decode()
        # Alice may not open user pages: her name, not a link.
        body = world.client("owner").get(url).content.decode()
        assert f'<span title="user {alice.pk}">alice</span>' in body
        assert _user_url(alice) not in body


def test_watchers_list_the_owner_first_as_the_api_does(world: World) -> None:
    body = world.client("owner").get(change_url(world.done)).content.decode()
    field = body[body.index("field-watchers_display") :].split("</div>\n")[0]
    names = re.findall(r">(\w+)</span>", field)
    assert names == ["alice", "wendy"]
    assert get_task_status(world.done, System()).watchers == (
        str(world.users["owner"].pk),
        str(world.users["watcher"].pk),
    )


def test_filters_by_created_date_owner_and_task_path(world: World) -> None:
    client = world.client("superuser")

    def listed(**query: str) -> set[str]:
        response = client.get(reverse(CHANGELIST), query)
        assert response.status_code == 200
        return {t.pk for t in response.context["cl"].result_list}

    sam = str(world.users["stranger"].pk)
    assert listed(owner=sam) == {world.other}
    other_path = submit_task("other-path", "tests.tasks.noop", Owner(sam))
    assert listed(task_path="tests.tasks.noop") == {other_path}
    assert listed(task_path="tests.tasks.add", owner=sam) == {world.other}
    # As the filter's "Today" link asks.
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    assert listed(created_at__gte=str(today)) >= {world.done, world.live, world.other}
    assert listed(created_at__gte=str(today + timedelta(days=1))) == set()
    filters = client.get(reverse(CHANGELIST)).context["cl"].filter_specs
    titles = [spec.title for spec in filters]
    assert {"created at", "owner", "task"} <= set(titles)
    owners = dict(filters[titles.index("owner")].lookup_choices)
    assert owners[sam] == "sam"


@pytest.mark.parametrize("owner", ["ann", "9" * 30, "-1"])
def test_an_owner_id_that_names_no_user_is_shown_as_it_is(world: World, owner: str) -> None:
    task_id = submit_task("odd-owner", "tests.tasks.add", Owner(owner), args=[1, 2])
    client = world.client("superuser")
    assert owner in client.get(reverse(CHANGELIST)).content.decode()
    assert owner in client.get(change_url(task_id)).content.decode()


def test_the_owner_filter_offers_only_owners_the_viewer_may_see(world: World) -> None:
    filters = world.client("stranger").get(reverse(CHANGELIST)).context["cl"].filter_specs
    [owners] = [spec for spec in filters if spec.title == "owner"]
    assert dict(owners.lookup_choices) == {str(world.users["stranger"].pk): "sam"}


def test_status_is_a_coloured_label(world: World) -> None:
    page = world.client("owner").get(reverse(CHANGELIST)).content.decode()
    assert 'class="dw-state dw-state-completed"' in page
    assert 'class="dw-state dw-state-pending"' in page
    task = world.client("owner").get(change_url(world.done)).content.decode()
    assert re.search(r'class="dw-state dw-state-completed"[^>]*>Completed</span>', task)


def test_a_nodes_task_page_links_to_its_workflow(world: World) -> None:
    alice = Owner.for_user(world.users["owner"])
    wf = Workflow("trip", alice)
    wf.add("book", add)
    workflow_id = wf.submit().id
    node_task = get_workflow_status(workflow_id, alice).nodes[0].task_id
    body = world.client("owner").get(change_url(node_task)).content.decode()
    workflow_url = reverse("admin:django_workers_workflowrecord_change", args=[quote(workflow_id)])
    assert f'<a href="{workflow_url}">{workflow_id}</a>' in body


@pytest.mark.parametrize("lookup", ["args__contains", "options__contains", "kwargs__has_key"])
def test_a_lookup_into_a_json_column_is_refused_cleanly(world: World, lookup: str) -> None:
    response = world.client("superuser").get(reverse(CHANGELIST), {lookup: "1"})
    assert response.status_code == 400


def test_a_lookup_into_the_nodes_of_a_workflow_is_refused_cleanly(world: World) -> None:
    url = reverse("admin:django_workers_workflowrecord_changelist")
    assert world.client("superuser").get(url, {"nodes__contains": "x"}).status_code == 400


def test_an_ended_task_is_reported_once_in_words_not_repeated(world: World) -> None:
    response = world.client("owner").post(cancel_url(world.done), follow=True)
    notes = [str(m) for m in response.context["messages"]]
    assert notes == [f"Task {world.done} has already ended (COMPLETED); nothing was cancelled."]


def test_a_task_selected_twice_is_reported_once(world: World) -> None:
    notes = _cancel_selected(world.client("owner"), [world.done, world.done, world.live])
    assert notes == [f"Cancelled: {world.live}.", f"Already ended: {world.done}."]
