"""The values stores take and give: record ids' fence, batches, submits, leases and counts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from django_workers.core import NewTask

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
    """A workflow row to write with its first node records (see ``engine.records``)."""

    id: str
    key: str
    owner: str | None
    plan_hash: str
    fail_fast: bool
    undo_on_cancel: bool
    #: The row's ``state``, ``outcome``, ``unabsorbed_failure``, ``cancel_undo`` and ``nodes``.
    state: Mapping[str, Any]
    created_at: datetime
    #: Seconds the workflow may run, and when its first run passes them (None: no deadline).
    deadline: float | None = None
    deadline_at: datetime | None = None
    #: The user ids granted read and cancel besides the owner (its nodes get them too).
    watchers: tuple[str, ...] = ()


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
