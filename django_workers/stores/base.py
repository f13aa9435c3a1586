"""The store contract: what every store answers about task records.

A store answers "what does the record say?". It holds data and two policy
hooks (the queue and watch authorizers) and owns nothing that runs: no
thread, no queue, no scheduler, no run handle. Every write below is one
conditional statement or one transaction whose precondition is checked by the
store itself, never "read, decide in Python, write" by its caller.

Two implementations behave identically: ``DatabaseWorkerStore`` (Django ORM)
and ``InMemoryWorkerStore`` (volatile, thread-safe). One contract test body
runs against both.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from django.db import DatabaseError

from django_workers.cancellation import CancelReason
from django_workers.core import NewTask
from django_workers.info import TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores.zombies import Refused, log_refused

if TYPE_CHECKING:
    from django_workers.workflows.records import WorkflowInfo

QueueAuthorizer = Callable[[str, str], bool]
WatchAuthorizer = Callable[[str, tuple[str, ...], str], bool]


class _AnyRun:
    """The named opt-out of the run_id fence; see ``ANY_RUN``."""

    def __repr__(self) -> str:
        return "ANY_RUN"


#: Pass as ``run_id`` to address a task's record whatever run it holds.
ANY_RUN: Final = _AnyRun()

RunId = str | _AnyRun

#: Fields ``set_task_state`` may write: state, never identity (watchers, run_id).
STATE_FIELDS: Final = frozenset(
    {
        "status",
        "progress",
        "result",
        "error",
        "errors",
        "cancel_reason",
        "attempts",
        "started_at",
        "finished_at",
        "run_after",
        "worker_id",
    }
)


def grants_of(new: NewTask) -> list[str]:
    """Watcher rows a record needs: everyone in ``new.watchers`` but the derived owner."""
    seen: list[str] = []
    for user_id in new.watchers:
        if user_id != new.owner and user_id not in seen:
            seen.append(user_id)
    return seen


class RecordStream(Sequence[NewTask]):
    """A batch's records, built the first time they are read, in order.

    A store that can write records while they are built (PostgreSQL's ``COPY``)
    reads it once from the start, so the server writes while Python builds; any
    other use builds the rest of the batch first. A record that fails its checks
    raises where it is reached, and again on every later read, so a store that
    meets it part-way must discard what it wrote of the batch.
    """

    __slots__ = ("_built", "_count", "_failed", "_source", "plain")

    def __init__(self, count: int, source: Iterable[NewTask], *, plain: bool) -> None:
        self._count = count
        self._source = iter(source)
        self._built: list[NewTask] = []
        self._failed: BaseException | None = None
        #: No record of the batch needs a watcher row: each is its task row alone.
        self.plain = plain

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[NewTask]:
        built = self._built
        index = 0
        while index < self._count:
            if index == len(built):
                built.append(self._next())
            yield built[index]
            index += 1

    def __getitem__(self, index: Any) -> Any:
        return self.whole()[index]

    def whole(self) -> list[NewTask]:
        """Every record, the rest of the batch built first."""
        if len(self._built) < self._count:
            for _ in self:
                pass
        return self._built

    def _next(self) -> NewTask:
        if self._failed is not None:
            raise self._failed
        try:
            return next(self._source)
        except BaseException as error:
            self._failed = error
            raise


@dataclass(frozen=True, slots=True, kw_only=True)
class NewWorkflow:
    """A workflow row to write with its first node records (see ``workflows.records``)."""

    id: str
    key: str
    owner: str | None
    plan_hash: str
    fail_fast: bool
    undo_on_cancel: bool
    #: The row's ``state``, ``outcome``, ``unabsorbed_failure``, ``cancel_undo`` and ``nodes``.
    state: Mapping[str, Any]
    created_at: datetime


@dataclass(slots=True)
class Submitted:
    """What a submit did: ``created`` a run (first or re-run) or joined a live one.

    Never changed once made; not frozen for the same reason as ``NewTask`` (one per
    task of a bulk submit).
    """

    id: str
    run_id: str
    created: bool
    replaced_run_id: str | None = None


def _first_run(new: NewTask) -> Submitted:
    return Submitted(new.id, new.run_id, created=True)


class AllCreated(Sequence[Submitted]):
    """``submit_many``'s answer for a batch written whole: a first run of every record.

    Its ``Submitted`` are made only when read; a bulk submit reads the records' ids
    and queues instead (``ids``, ``queues``), a thousand objects fewer a batch.
    """

    __slots__ = ("_records",)

    def __init__(self, records: Sequence[NewTask]) -> None:
        self._records = records.whole() if isinstance(records, RecordStream) else records

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [_first_run(new) for new in self._records[index]]
        return _first_run(self._records[index])

    def __iter__(self) -> Iterator[Submitted]:
        return map(_first_run, self._records)

    def ids(self) -> list[str]:
        """The task ids, in the batch's order."""
        return [new.id for new in self._records]

    def queues(self) -> set[str]:
        """The queues the batch's runs wait in."""
        return {new.queue for new in self._records}


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRegistration:
    """The lease row of one runtime."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: datetime
    heartbeat_at: datetime
    #: Runs whose record ended while their function still executes (read by list_workers).
    held_slots: int = 0
    #: How the runtime learns of new work (``wakeup.wake_up_text``); "" if it did not say.
    wake_up: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueCounts:
    """The live tasks of one queue: how many wait, how many run, since when the oldest waits."""

    queue: str
    pending: int = 0
    #: PENDING records that ran before (attempts >= 1): a retry, or a recovered run.
    retrying: int = 0
    running: int = 0
    #: Runs of this queue whose record ended while their function still executes.
    held_slots: int = 0
    #: Creation time of the oldest PENDING task; None when nothing is pending.
    oldest_pending: datetime | None = None
    #: The RUNNING tasks of this queue per worker id.
    running_by_worker: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndedCounts:
    """The records of one queue that ended COMPLETED, and FAILED, since each instant asked."""

    queue: str
    #: One count per instant of ``ended_counts(since)``, in its order.
    completed: tuple[int, ...]
    failed: tuple[int, ...]


@dataclass(slots=True)
class _Policy:
    queue_authorizer: QueueAuthorizer | None = None
    watch_authorizer: WatchAuthorizer | None = None


class WorkerStore(abc.ABC):
    """Data access plus policy hooks; see the module docstring."""

    #: True when records outlive this process (another process may run them).
    durable: bool = False

    def __init__(
        self,
        *,
        queue_authorizer: QueueAuthorizer | None = None,
        watch_authorizer: WatchAuthorizer | None = None,
    ) -> None:
        self._policy = _Policy(queue_authorizer, watch_authorizer)

    # -- policy hooks --

    @property
    def queue_authorizer(self) -> QueueAuthorizer | None:
        """``fn(queue_name, user_id) -> bool`` consulted on every Owner submit."""
        return self._policy.queue_authorizer

    @property
    def watch_authorizer(self) -> WatchAuthorizer | None:
        """``fn(task_id, watchers, user_id) -> bool`` for joining a task one does not watch."""
        return self._policy.watch_authorizer

    def set_queue_authorizer(self, fn: QueueAuthorizer | None) -> None:
        """Replace the queue authorizer; None disables the queue check."""
        self._policy.queue_authorizer = fn

    def set_watch_authorizer(self, fn: WatchAuthorizer | None) -> None:
        """Replace the watch authorizer; None denies every cross-user join."""
        self._policy.watch_authorizer = fn

    # -- submitting --

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

    # -- reading --

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

    # -- state changes --

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

    # -- the runtime's questions --

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
        stores neither and raises, and the caller retries the ends alone. This one
        does them one after the other: the ends are stored even when the claim
        fails, whose error is not raised (nothing is claimed then; the worker's
        claim loop claims later).
        """
        won = self.end_tasks(ends)
        if limit <= 0:
            return won, []
        try:
            return won, self.claim(worker_id, queues, limit, now, queue_limits)
        except DatabaseError:
            self.reset_connection()
            return won, []

    @abc.abstractmethod
    def cancel_workflow(
        self, workflow_id: str, undo: bool | None, drop_undo: bool = False
    ) -> bool | None:
        """Cancel a workflow in one transaction; None if missing, False if it had ended.

        ``undo=False`` drops the compensation of an accepted cancel only with
        ``drop_undo``; else it raises WorkflowCancelNarrows and changes nothing.
        """

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

    @abc.abstractmethod
    def delete_finished(self, status: TaskStatus, before: datetime, batch: int) -> int:
        """Delete up to ``batch`` records of ``status`` that finished before ``before``, oldest
        first."""

    @abc.abstractmethod
    def delete_finished_workflows(self, before: datetime, batch: int) -> int:
        """Delete up to ``batch`` workflows that ended before ``before``, with their records."""

    @abc.abstractmethod
    def count_finished_workflows(self, before: datetime) -> int:
        """How many workflows ``delete_finished_workflows(before, ...)`` would delete in all."""

    @abc.abstractmethod
    def count_finished(self, status: TaskStatus, before: datetime) -> int:
        """How many records ``delete_finished(status, before, ...)`` would delete in all."""

    # -- the operators' questions --

    @abc.abstractmethod
    def queue_counts(self) -> list[QueueCounts]:
        """Pending, retrying, running and held counts of every queue that has any, by name."""

    @abc.abstractmethod
    def ended_counts(self, since: Sequence[datetime]) -> list[EndedCounts]:
        """Count, per queue, the records that ended COMPLETED or FAILED since each instant.

        A record counts for each of ``since`` at or before its ``finished_at``. The
        earliest instant bounds the read: older records are never looked at.
        """

    def database_now(self) -> datetime | None:
        """The database server's current time; None where it is this process's clock."""
        return None

    def subscribe(self, wake: Callable[[], None]) -> None:  # noqa: B027
        """Have ``wake()`` called on enqueue in this process (stores without NOTIFY)."""

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

    def reset_connection(self) -> None:  # noqa: B027
        """Drop this thread's connection after an error, so the next call reconnects."""

    def notify_enqueued(self, queues: Iterable[str]) -> None:  # noqa: B027
        """Tell idle workers that these queues have new work (a no-op without LISTEN/NOTIFY)."""

    def notify_cancelled(self, task_id: str, run_id: str) -> None:  # noqa: B027
        """Tell the worker running ``run_id`` to stop (a no-op without LISTEN/NOTIFY)."""

    def check_runtime_start(self) -> None:  # noqa: B027
        """Raise RuntimeInTransaction if a runtime's threads cannot work from this thread now."""

    def clear_records(self) -> None:  # noqa: B027
        """Forget every record; volatile stores only, a no-op on durable ones."""
