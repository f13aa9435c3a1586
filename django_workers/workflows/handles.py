"""Workflow handles: read, wait for, cancel and re-run a submitted workflow from any process.

Every call takes an authority, as the task API does. An ``Owner`` sees only
the workflows they own (ids ``"<user_id>::<key>"``) or watch; ``System()`` sees
every workflow. A workflow the authority may not see is ``WorkflowNotFound``,
exactly like one that does not exist. For an ``Owner``, a bare key (no
``::``) names their own workflow: ``open_workflow("order-1", Owner("42"))``
opens ``"42::order-1"``, else the global workflow ``"order-1"`` if they watch it.
Who may see a workflow is ``visibility``'s rule: its owner and its watchers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from django_workers import visibility
from django_workers.api import MAX_LIMIT, deliver_cancel
from django_workers.authority import (
    SEPARATOR,
    TASK_ID_MAX_LENGTH,
    Authority,
    Owner,
    check_authority,
    user_id_of,
)
from django_workers.cancellation import CancelReason
from django_workers.engine.records import SHOWN_STATES, WorkflowInfo
from django_workers.exceptions import (
    AuthorizationError,
    InvalidWorkflow,
    WorkflowAlreadyFinished,
    WorkflowNotFound,
)
from django_workers.handles import wait_until_finished
from django_workers.stores import WorkerStore, default_store

#: The states a snapshot shows, and ``get_all_workflows(state=...)`` filters on.
STATES: Final = SHOWN_STATES
#: The reasons a workflow's cancel gives the nodes it stops.
_STOPS: Final = frozenset({CancelReason.USER, CancelReason.DEADLINE})


class WorkflowHandle:
    """One workflow, as an authority that may see it reads, waits for and cancels it."""

    def __init__(self, workflow_id: str, authority: Authority, store: WorkerStore) -> None:
        self.id = workflow_id
        self._authority = authority
        self._store = store

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.id!r}>"

    def status(self) -> WorkflowInfo:
        """The workflow and each node as they stand now."""
        return get_workflow_status(self.id, self._authority, store=self._store)

    def wait(self, timeout: float | None = None) -> WorkflowInfo:
        """Block until the workflow ends (compensation included); TimeoutError after ``timeout``.

        A wait that times out leaves the workflow alone; ``cancel()`` stops it.
        """
        return wait_until_finished(self._store, self.id, self.status, timeout, self._late)

    def cancel(self, undo: bool | None = None, *, drop_undo: bool = False) -> WorkflowInfo:
        """Cancel the workflow; see ``cancel_workflow``."""
        return cancel_workflow(
            self.id, self._authority, undo=undo, drop_undo=drop_undo, store=self._store
        )

    def rerun(self, *, plan_hash: str | None = None) -> WorkflowInfo:
        """Run the workflow again from where it failed; see ``rerun_workflow``."""
        return rerun_workflow(self.id, self._authority, plan_hash=plan_hash, store=self._store)

    def _late(self, timeout: float) -> str:
        return (
            f"Workflow {self.id!r} did not end within {timeout:g} s; it was left alone "
            "(call cancel() to stop it)."
        )


def open_workflow(
    workflow_id: str, authority: Authority, *, store: WorkerStore | None = None
) -> WorkflowHandle:
    """A handle on a workflow the authority may see, else WorkflowNotFound."""
    store = store or default_store()
    info = get_workflow_status(workflow_id, authority, store=store)
    return WorkflowHandle(info.id, authority, store)


def get_workflow_status(
    workflow_id: str, authority: Authority, *, store: WorkerStore | None = None
) -> WorkflowInfo:
    """The snapshot of a workflow the authority may see, else WorkflowNotFound."""
    authority = check_authority(authority)
    store = store or default_store()
    for full_id in _full_ids(workflow_id, authority):
        if not _may_exist(full_id):
            # Checked before any query: a NUL reaches PostgreSQL as an error, not as "no such id".
            continue
        info = store.get_workflow(full_id)
        if info is not None and visibility.may_see_workflow(info, authority):
            return info
    raise WorkflowNotFound(workflow_id)


def cancel_workflow(
    workflow_id: str,
    authority: Authority,
    *,
    undo: bool | None = None,
    drop_undo: bool = False,
    store: WorkerStore | None = None,
) -> WorkflowInfo:
    """Cancel a running workflow; return its new snapshot.

    Waiting nodes are cancelled, queued ones never start, running ones are
    cancelled like ``cancel_task`` (their token says ``user``). ``undo=None``
    compensates as the workflow's ``undo_on_cancel`` said at submit;
    ``undo=False`` does not; ``undo=True`` may not widen an ``undo_on_cancel=False``.
    While nodes still run, a repeated cancel changes nothing, except that
    ``undo=False`` with ``drop_undo=True`` drops the compensation an earlier
    cancel asked for (without ``drop_undo``: WorkflowCancelNarrows).
    WorkflowAlreadyFinished once the workflow has ended or its nodes have all stopped.
    """
    if undo is not None and not isinstance(undo, bool):
        raise InvalidWorkflow(f"undo must be None, True or False, got {undo!r}.")
    store = store or default_store()
    info = get_workflow_status(workflow_id, authority, store=store)
    if undo and not info.undo_on_cancel:
        raise InvalidWorkflow(
            f"Workflow {info.id!r} was submitted with undo_on_cancel=False; a cancel may only "
            "narrow that. Pass undo=None or undo=False."
        )
    if not store.cancel_workflow(info.id, undo, drop_undo):
        now = store.get_workflow(info.id) or info
        raise WorkflowAlreadyFinished(info.id, now.state)
    after = get_workflow_status(info.id, authority, store=store)
    _deliver_cancels(store, after)
    return after


def rerun_workflow(
    workflow_id: str,
    authority: Authority,
    *,
    plan_hash: str | None = None,
    store: WorkerStore | None = None,
) -> WorkflowInfo:
    """Run a failed, cancelled or compensation_failed workflow again; return its new snapshot.

    Completed nodes keep their results and do not run again; the failed,
    cancelled, never-run and undone nodes (and the nodes after them) run again in
    dependency order, under new run ids, keeping their earlier errors. The state
    and ``plan_hash`` (if given: the hash the caller read) are checked in the same
    transaction that sets the workflow running; ``runs`` counts the runs.
    WorkflowCannotRerun says why a workflow cannot be re-run (a compensated one
    was undone). The owner or ``System()`` may re-run a workflow.
    """
    if plan_hash is not None and not isinstance(plan_hash, str):
        raise InvalidWorkflow(f"plan_hash must be a string or None, got {plan_hash!r}.")
    store = store or default_store()
    info = get_workflow_status(workflow_id, authority, store=store)
    if not _may_write(info, authority):
        raise AuthorizationError(
            f"Only the owner of workflow {info.id!r} or System() may re-run it."
        )
    if store.rerun_workflow(info.id, plan_hash) is None:
        raise WorkflowNotFound(workflow_id)
    return get_workflow_status(info.id, authority, store=store)


def get_all_workflows(
    authority: Authority,
    *,
    state: str | None = None,
    offset: int = 0,
    limit: int = 100,
    store: WorkerStore | None = None,
) -> list[WorkflowInfo]:
    """The workflows the authority may see, newest first (then by id), ``limit`` at most."""
    authority = check_authority(authority)
    if state is not None and state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}; got {state!r}.")
    for name, value, low, high in (("offset", offset, 0, None), ("limit", limit, 1, MAX_LIMIT)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
        if high is not None and value > high:
            raise ValueError(f"{name} must be at most {high}, got {value}.")
    store = store or default_store()
    return store.list_workflows(
        user_id=user_id_of(authority), state=state, offset=offset, limit=limit
    )


def _full_ids(workflow_id: str, authority: Authority) -> tuple[str, ...]:
    """The ids ``workflow_id`` may name for ``authority``, in the order they are looked up.

    For an Owner a bare key names its own workflow first, then a global workflow of
    that id (which it sees only if it watches it).
    """
    if (
        isinstance(authority, Owner)
        and isinstance(workflow_id, str)
        and SEPARATOR not in workflow_id
    ):
        return (f"{authority.user_id}{SEPARATOR}{workflow_id}", workflow_id)
    return (workflow_id,)


def _may_exist(workflow_id: object) -> bool:
    return (
        isinstance(workflow_id, str)
        and 0 < len(workflow_id) <= TASK_ID_MAX_LENGTH
        and workflow_id.isprintable()
    )


def _may_write(info: WorkflowInfo, authority: Authority) -> bool:
    """Whether the authority may change what the workflow does: its owner or System().

    Not its watchers: they may read and cancel it, and a re-run is a write.
    """
    return not isinstance(authority, Owner) or info.owner == authority.user_id


def _deliver_cancels(store: WorkerStore, info: WorkflowInfo) -> None:
    """Set the token of this process's runs the cancel asked to stop (others poll or LISTEN)."""
    for task_id in _stopped(info):
        record = store.get_task_info(task_id)
        if record is not None and record.worker_id and record.cancel_reason in _STOPS:
            deliver_cancel(store, record)


def _stopped(info: WorkflowInfo) -> Iterable[str]:
    return (node.task_id for node in info.nodes if node.state == "running")
