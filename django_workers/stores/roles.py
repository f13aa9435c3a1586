"""The store contract by role: what a store does, one protocol per kind of question.

``WorkerStore`` (``stores.base``) combines them; a caller that needs one role may
name that protocol alone. A store answers "what does the record say?": it holds
data and owns nothing that runs (no thread, no queue, no scheduler, no run
handle). Every write below is one conditional statement or one transaction whose
precondition is checked by the store itself, never "read, decide in Python,
write" by its caller.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from django_workers.cancellation import CancelReason
from django_workers.core import NewTask
from django_workers.info import TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores.values import (
    EndedCounts,
    NewWorkflow,
    QueueCounts,
    RunId,
    Submitted,
    WorkerRegistration,
)
from django_workers.stores.zombies import Refused, log_refused

if TYPE_CHECKING:
    from django_workers.engine.records import WorkflowInfo


class TaskRecords(Protocol):
    """Writes a record, its watchers or its live state; each checked by the store itself."""

    @abc.abstractmethod
    def submit(self, new: NewTask, caller: str | None) -> Submitted:
        """Insert ``new``, join the live task under its id, or re-run a finished one, atomically.

        ``caller`` is the submitting user id, None for System. A caller who does
        not watch an existing id is let in only by the watch authorizer, else
        AuthorizationError and nothing is written.
        """

    def submit_many(self, news: Sequence[NewTask], caller: str | None) -> Sequence[Submitted]:
        """Submit several tasks; stores write new ones in one statement where they can."""
        return [self.submit(new, caller) for new in news]

    @abc.abstractmethod
    def replace_task(self, new: NewTask) -> None:
        """Overwrite a record whole (new run_id, watchers reset). Only a re-run calls this."""

    @abc.abstractmethod
    def add_watcher(self, task_id: str, user_id: str) -> bool:
        """Grant ``user_id`` access without duplicating or clobbering; True if newly added."""

    @abc.abstractmethod
    def submit_workflow(self, workflow: NewWorkflow, tasks: Sequence[NewTask]) -> str | None:
        """Write a workflow and its node records at once; None if written.

        If the id exists, nothing is written and the existing plan hash is returned.
        A node record whose id is taken by another task refuses the whole workflow
        (InvalidWorkflow).
        """

    @abc.abstractmethod
    def try_transition(
        self,
        task_id: str,
        run_id: RunId,
        from_states: Iterable[TaskStatus],
        to_state: TaskStatus,
        *,
        claimed_by: str | None = None,
        **fields: Any,
    ) -> bool:
        """Move the task to a live ``to_state`` if it is in ``from_states`` and holds ``run_id``.

        ``claimed_by`` also requires the record to name that worker: a run's own
        writes pass it, because a re-claim after a zombie sweep keeps the run_id.
        A terminal ``to_state`` is refused (ValueError): every end goes through
        ``end_tasks``.
        """

    @abc.abstractmethod
    def set_task_state(self, task_id: str, run_id: RunId, **fields: Any) -> bool:
        """Write live state fields (``STATE_FIELDS``) of the run ``run_id``.

        Never watchers or run_id, and never a terminal status (that is ``end_tasks``).
        """


class TaskReads(Protocol):
    """Snapshots of records and workflows, and the operators' counts; never a live object."""

    @abc.abstractmethod
    def get_task_info(self, task_id: str) -> TaskInfo | None:
        """The durable snapshot of a record, or None. Never a live object."""

    @abc.abstractmethod
    def list_tasks(
        self,
        *,
        user_id: str | None,
        status: TaskStatus | None = None,
        queue: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[TaskInfo]:
        """Tasks ``user_id`` owns or watches (all for None), newest first, then by id."""

    @abc.abstractmethod
    def get_workflow(self, workflow_id: str) -> WorkflowInfo | None:
        """The snapshot of a workflow with its nodes' records, or None."""

    @abc.abstractmethod
    def list_workflows(
        self,
        *,
        user_id: str | None,
        state: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[WorkflowInfo]:
        """Workflows ``user_id`` owns (all for None), newest first, then by id."""

    @abc.abstractmethod
    def queue_counts(self) -> list[QueueCounts]:
        """Pending, retrying, running and held counts of every queue that has any, by name."""

    @abc.abstractmethod
    def ended_counts(self, since: Sequence[datetime]) -> list[EndedCounts]:
        """Count, per queue, the records that ended COMPLETED or FAILED since each instant.

        A record counts for each of ``since`` at or before its ``finished_at``. The
        earliest instant bounds the read: older records are never looked at.
        """


class RunQueue(Protocol):
    """What runtimes take and give back: claims, ends, and the workflows' reactions to them."""

    @abc.abstractmethod
    def claim(
        self,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None = None,
    ) -> list[TaskInfo]:
        """Mark up to ``limit`` ready tasks RUNNING for ``worker_id`` and return them.

        Highest priority first, then oldest; ``run_after`` respected; per-queue
        concurrency limits (``queue_limits``: name -> most RUNNING at once)
        hold across every worker sharing the store. A claim counts an attempt.
        """

    @abc.abstractmethod
    def end_tasks(self, ends: Sequence[TaskEnd]) -> list[bool]:
        """Apply several ends in one transaction, each fenced on its run; return which won.

        The one door through which a record ends (or, for a requeue or a released
        claim, goes back to its queue): ``lifecycle`` says which statuses each kind
        of end applies to and what it writes. An end applies only while the record
        holds its ``run_id``, is in one of its statuses and, when the end names a
        worker, names that worker. An end that leaves a running function behind
        (a cancel or timeout of a RUNNING record) records a held slot for that run
        in the same transaction; a run's own end that lost its fence releases the
        slot its run held. This transaction is where a workflow reacts to an end.
        """

    def end_and_claim(
        self,
        ends: Sequence[TaskEnd],
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None = None,
    ) -> tuple[list[bool], list[TaskInfo]]:
        """``end_tasks(ends)``, then ``claim(...)`` of up to ``limit`` runs for the freed slots.

        A worker's finished runs and the claim that refills their slots: the ends
        are written first, so the worker never holds more RUNNING records than
        slots. A store may do both in one transaction (one commit): then a failure
        stores neither and raises, and the caller retries the ends alone.
        ``WorkerStore`` gives the one-after-the-other default.
        """

    @abc.abstractmethod
    def cancel_workflow(
        self,
        workflow_id: str,
        undo: bool | None,
        drop_undo: bool = False,
        reason: CancelReason = CancelReason.USER,
        now: datetime | None = None,
    ) -> bool | None:
        """Cancel a workflow in one transaction; None if missing, False if it had ended.

        ``undo=False`` drops the compensation of an accepted cancel only with
        ``drop_undo``; else it raises WorkflowCancelNarrows and changes nothing.
        ``reason`` is what the stopped nodes are told; the first cancel's reason is
        the workflow's. A ``deadline`` cancel applies only, checked under the lock,
        to a run past its deadline at ``now`` that no cancel has reached (else
        False). ``now``: the instant of the cancel, the store's clock by default.
        """

    @abc.abstractmethod
    def rerun_workflow(self, workflow_id: str, plan_hash: str | None) -> bool | None:
        """Run an ended workflow again from where it failed, in one transaction; None if missing.

        Under the row's lock: refuses (WorkflowCannotRerun, nothing written) a
        workflow not failed, cancelled or compensation_failed, or whose plan hash is
        not ``plan_hash`` when given. Else its not-completed nodes get fresh records
        (new run ids, their ``errors`` kept), ``runs`` grows by one, and it runs.
        """

    @abc.abstractmethod
    def overdue_workflows(self, now: datetime, limit: int) -> list[str]:
        """Ids of up to ``limit`` running workflows past their deadline at ``now``, uncancelled."""

    @abc.abstractmethod
    def begin_runs(self, runs: Sequence[TaskInfo]) -> list[bool]:
        """The pre-run check of claimed workflow runs: which may start their function.

        A claimed node counts as started for its workflow; a cancel that meets it asks
        its run to stop, and this check reads that request: such a run ends CANCELLED
        here (its workflow reacting as to any end) and never starts. Takes no lock.
        """

    @abc.abstractmethod
    def runs_claimed_by(self, worker_id: str) -> list[TaskInfo]:
        """The RUNNING records that name ``worker_id`` as their worker."""

    @abc.abstractmethod
    def runs_to_stop(self, worker_id: str, runs: Mapping[str, str]) -> dict[str, CancelReason]:
        """Which of ``worker_id``'s runs (task id -> run id) must stop, and why.

        A run whose record was cancelled answers its stored reason; one whose
        record now holds another run, or no longer names this worker, answers
        ``superseded``. Runs that may go on are left out.
        """


class WorkerLeases(Protocol):
    """The lease rows of runtimes, and the recovery of the runs dead ones left behind."""

    @abc.abstractmethod
    def register_worker(self, worker: WorkerRegistration) -> None:
        """Create the lease row of a runtime."""

    @abc.abstractmethod
    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        """Renew a lease; False if the row is gone (the worker was declared dead)."""

    @abc.abstractmethod
    def remove_worker(self, worker_id: str) -> None:
        """Delete a lease row (clean exit)."""

    def record_wake_up(self, worker_id: str, wake_up: str) -> bool:
        """Store in a lease row how its runtime now learns of new work; False if it is gone."""
        return False

    @abc.abstractmethod
    def list_workers(self) -> list[WorkerRegistration]:
        """Every registered runtime."""

    @abc.abstractmethod
    def recover_zombies(
        self,
        *,
        now: datetime,
        stale_before: datetime | None,
        dead: Iterable[str] = (),
        refused: Refused = log_refused,
    ) -> list[TaskEnd]:
        """End or requeue the RUNNING runs of dead workers through ``end_tasks``; never a live one.

        Dead: a lease whose last heartbeat is older than ``stale_before`` (the
        database's clock; None: no lease counts as expired), an id in ``dead`` (a
        same-host pid that is gone), or no lease row at all. ``now`` stamps the
        ends. A run with retries left goes back to PENDING, others end FAILED
        "Worker lost"; the slots dead workers held are freed. A record that cannot
        be ended (its end is refused) is told to ``refused`` and left for the next
        sweep; the others are still recovered. Returns the ends that won.
        """

    def database_now(self) -> datetime | None:
        """The database server's current time; None where it is this process's clock."""
        return None


class Notification(Protocol):
    """How runtimes learn of new work and of cancels; no-ops where the store has no way."""

    def subscribe(self, wake: Callable[[], None]) -> None:
        """Have ``wake()`` called on enqueue in this process (stores without NOTIFY)."""
        return None

    def wake_file(self) -> str | None:
        """The SQLite file whose same-host wake-up sockets this store's writers use, if any."""
        return None

    def listen_params(self) -> dict[str, Any] | None:
        """Connection parameters for a LISTEN/NOTIFY wake-up; None where there is none."""
        return None

    def listen_alias(self) -> str | None:
        """The database alias LISTEN connections use (``listen_params``); None where none do."""
        return None

    def listening_connection(self) -> AbstractContextManager[Any]:
        """This thread's own connection as a psycopg connection, to LISTEN on (``listen_params``).

        Where LISTEN goes through the store's own alias, the store's calls from the
        same thread use it too, so a runtime claims on the connection that received
        the notice. It is closed on exit.
        """
        raise NotImplementedError(f"{type(self).__name__} has no LISTEN connection")

    def send_notice(self, channel: str, payload: str) -> None:
        """NOTIFY ``channel`` through a connection of its own, as the store's writes notify."""
        raise NotImplementedError(f"{type(self).__name__} has no NOTIFY")

    def reset_connection(self) -> None:
        """Drop this thread's connection after an error, so the next call reconnects."""
        return None

    def notify_enqueued(self, queues: Iterable[str]) -> None:
        """Tell idle workers that these queues have new work (a no-op without LISTEN/NOTIFY)."""
        return None

    def notify_cancelled(self, task_id: str, run_id: str) -> None:
        """Tell the worker running ``run_id`` to stop (a no-op without LISTEN/NOTIFY)."""
        return None

    def check_runtime_start(self) -> None:
        """Raise RuntimeInTransaction if a runtime's threads cannot work from this thread now."""
        return None


class Retention(Protocol):
    """Forgetting what ended long ago."""

    @abc.abstractmethod
    def count_finished(self, status: TaskStatus, before: datetime) -> int:
        """How many records ``delete_finished(status, before, ...)`` would delete in all."""

    @abc.abstractmethod
    def delete_finished(self, status: TaskStatus, before: datetime, batch: int) -> int:
        """Delete up to ``batch`` records of ``status`` that finished before ``before``, oldest
        first."""

    @abc.abstractmethod
    def count_finished_workflows(self, before: datetime) -> int:
        """How many workflows ``delete_finished_workflows(before, ...)`` would delete in all."""

    @abc.abstractmethod
    def delete_finished_workflows(self, before: datetime, batch: int) -> int:
        """Delete up to ``batch`` workflows that ended before ``before``, with their records."""

    def clear_records(self) -> None:
        """Forget every record; volatile stores only, a no-op on durable ones."""
        return None
