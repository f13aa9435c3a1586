"""How ``DatabaseWorkerStore`` writes ends: chosen once per database, never probed per call.

``EndWriter`` is the portable way: one conditional UPDATE per end, fenced on its
run. ``PostgresEndWriter`` writes runs' ends in one statement a group, locks a
workflow's row and ends its nodes in one round trip, and joins the claim that
refills the freed slots to the ends' transaction. The store's run queue asks its
writer for each step; where a step does not apply, the writer answers None.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from django.db import DatabaseError, connections
from django.db.models import F

from django_workers import clock, lifecycle
from django_workers.core import GrantedTaskRow, WorkflowColumns, WorkflowRow
from django_workers.engine import persistence
from django_workers.info import TaskStatus
from django_workers.lifecycle import EndKind, TaskEnd
from django_workers.models import HeldSlot
from django_workers.stores import sql

if TYPE_CHECKING:
    from django_workers.stores.database.access import DatabaseAccess

#: The columns of a workflow row, read with .values().
WORKFLOW_COLUMNS = sql.WORKFLOW_COLUMNS


def end_writer(store: DatabaseAccess, alias: str) -> EndWriter:
    """The writer for the database ``alias`` names."""
    if connections[alias].vendor == "postgresql":
        return PostgresEndWriter(store)
    return EndWriter(store)


class EndWriter:
    """Ends written one fenced UPDATE each: every database's way."""

    def __init__(self, store: DatabaseAccess) -> None:
        self.store = store

    def alone(self, ends: Sequence[TaskEnd]) -> bool:
        """Whether writing ``ends`` is atomic by itself, with no transaction around it."""
        # A lone end that touches no slot is one conditional UPDATE.
        return len(ends) == 1 and not ends[0].holds_slot and ends[0].kind not in lifecycle.RETURNED

    def write(self, ends: Sequence[TaskEnd]) -> list[bool]:
        """Apply each end's fenced write; which won."""
        return [self.end_one(end) for end in ends]

    def end_one(self, end: TaskEnd) -> bool:
        """Apply one end's fenced write (with the held slot it records, if any)."""
        fenced = self.store._fenced(end.task_id, end.run_id).filter(
            status__in=list(end.from_statuses)
        )
        if end.worker_id is not None:
            fenced = fenced.filter(worker_id=end.worker_id)
        fields = lifecycle.fields_of(end)
        if delta := lifecycle.attempts_delta(end):
            fields["attempts"] = F("attempts") + delta
        if end.holds_slot:
            # Locked until commit, so the status read here is the one the update sees.
            row = fenced.select_for_update().values("status", "queue", "worker_id").first()
            if row is None:
                return False
            if row["status"] == TaskStatus.RUNNING:
                self.store._slots().bulk_create(
                    [
                        HeldSlot(
                            run_id=end.run_id,
                            task_id=end.task_id,
                            queue=row["queue"],
                            # A running record always names its worker.
                            worker_id=cast(str, row["worker_id"]),
                            held_since=clock.now(),
                        )
                    ],
                    ignore_conflicts=True,
                )
            fenced = fenced.filter(status=row["status"])
        return fenced.update(**fields) == 1

    def release_slots(self, lost: Sequence[TaskEnd]) -> None:
        """A run's own end that lost its fence: its function returned, so its slot frees."""
        runs = [e.run_id for e in lost if e.kind in lifecycle.RETURNED]
        if runs:
            workers = {e.worker_id for e in lost if e.kind in lifecycle.RETURNED}
            self.store._slots().filter(run_id__in=runs, worker_id__in=workers).delete()

    def lock_and_finish(
        self, ends: Sequence[TaskEnd], flows: list[str]
    ) -> tuple[list[WorkflowRow], list[bool]] | None:
        """Lock the workflows and write the ends in one round trip: their rows, which ends won.

        None where it cannot be done so.
        """
        return None

    def in_two_round_trips(
        self,
        ends: Sequence[TaskEnd],
        flows: list[str],
        claim: sql.ClaimArgs | None = None,
    ) -> tuple[list[bool], list[GrantedTaskRow]] | None:
        """Workflow nodes' ends, their promotions (and a claim) in two round trips; None here."""
        return None

    def end_and_claim(
        self, ends: Sequence[TaskEnd], claim: sql.ClaimArgs, limits: Mapping[str, int]
    ) -> tuple[list[bool], list[GrantedTaskRow]] | None:
        """The ends and the claim in the ends' own round trips; None where it cannot be."""
        return None

    def promote(self, task_ids: Sequence[str]) -> None:
        """Make these workflow nodes PENDING, those still WAITING."""
        waiting = self.store._records().filter(pk__in=list(task_ids), status=TaskStatus.WAITING)
        waiting.update(status=TaskStatus.PENDING)

    def save_workflow(
        self, workflow_id: str, fields: Mapping[str, Any], promote: Sequence[str]
    ) -> None:
        """Write a workflow's row and make the nodes ``promote`` names PENDING."""
        if promote:
            self.promote(promote)
        self.store._flows().filter(pk=workflow_id).update(**fields)


class PostgresEndWriter(EndWriter):
    """PostgreSQL's: runs' ends of distinct tasks in one statement, workflows in two trips."""

    def alone(self, ends: Sequence[TaskEnd]) -> bool:
        if self._all_runs(ends):
            # One statement per group of distinct tasks: alone, it is atomic by itself.
            return self._one_statement_of_runs(ends)
        return super().alone(ends)

    def write(self, ends: Sequence[TaskEnd]) -> list[bool]:
        """Apply each end's fenced write (runs' ends on PostgreSQL in one statement a group)."""
        if not self._all_runs(ends):
            return super().write(ends)
        # A task id twice in a group (a timeout's end and the run's own) goes to a later
        # statement, so each row is written at most once each.
        won: dict[int, bool] = {}
        for group in _distinct_task_groups(ends):
            winners = sql.finish_postgres(connections[self.store.using], [e for _, e in group])
            for n, end in group:
                won[n] = (end.task_id, end.run_id) in winners
        return [won[n] for n in range(len(ends))]

    def lock_and_finish(
        self, ends: Sequence[TaskEnd], flows: list[str]
    ) -> tuple[list[WorkflowRow], list[bool]] | None:
        """Runs' ends of distinct tasks on PostgreSQL: the lock and the write in one round trip."""
        if not self._one_statement_of_runs(ends):
            return None
        found = sql.lock_and_finish_postgres(
            connections[self.store.using], flows, WORKFLOW_COLUMNS, ends
        )
        if found is None:
            return None
        rows, winners = found
        return rows, _won(ends, winners)

    def in_two_round_trips(
        self,
        ends: Sequence[TaskEnd],
        flows: list[str],
        claim: sql.ClaimArgs | None = None,
    ) -> tuple[list[bool], list[GrantedTaskRow]] | None:
        """Runs' ends on PostgreSQL whose workflows only promote (the usual case), in autocommit.

        One round trip opens the transaction, locks the workflow rows and writes the
        ends; the machine decides; a second writes each workflow with its promotions
        (and, with ``claim``, claims for the freed slots) and commits. An end that asks
        for more (a refusal, a stop, an undo) rolls back and goes the general way.
        Returns which ends won and the claimed rows; None where this does not apply.
        """
        if not (self._one_statement_of_runs(ends) and self.store._autocommit()):
            return None
        connection = connections[self.store.using]
        try:
            # Its BEGIN stays open on the server if a statement after it is refused.
            found = sql.lock_and_finish_postgres(
                connection, flows, WORKFLOW_COLUMNS, ends, begin=True
            )
            if found is None:
                return None
            saves = self._plain_reactions(ends, *found)
            if saves is None:
                sql.rollback_postgres(connection)
                return None
            claimed = sql.commit_workflows_postgres(connection, saves[1], claim)
        except BaseException:
            with contextlib.suppress(DatabaseError):
                sql.rollback_postgres(connection)
            raise
        won = saves[0]
        self.release_slots([e for e, ok in zip(ends, won, strict=True) if not ok])
        return won, claimed

    def end_and_claim(
        self, ends: Sequence[TaskEnd], claim: sql.ClaimArgs, limits: Mapping[str, int]
    ) -> tuple[list[bool], list[GrantedTaskRow]] | None:
        if not self._claims_with_ends(ends, limits):
            return None
        flows = persistence.workflows_of(ends)
        # Workflow nodes: the claim joins the second round trip, before its COMMIT.
        if flows:
            return self.in_two_round_trips(ends, flows, claim)
        return self._finish_and_claim(ends, claim, limits)

    def save_workflow(
        self, workflow_id: str, fields: Mapping[str, Any], promote: Sequence[str]
    ) -> None:
        # The promotions this state made go in the same round trip.
        sql.save_workflow_postgres(connections[self.store.using], workflow_id, fields, promote)

    def _finish_and_claim(
        self, ends: Sequence[TaskEnd], claim: sql.ClaimArgs, limits: Mapping[str, int]
    ) -> tuple[list[bool], list[GrantedTaskRow]] | None:
        """Plain runs' ends and the claim, in one round trip; None where it cannot be."""
        found = sql.finish_and_claim_postgres(connections[self.store.using], ends, claim, limits)
        if found is None:
            return None
        won = _won(ends, found[0])
        self.release_slots([e for e, ok in zip(ends, won, strict=True) if not ok])
        return won, found[1]

    def _claims_with_ends(self, ends: Sequence[TaskEnd], limits: Mapping[str, int]) -> bool:
        """Runs' ends on PostgreSQL in autocommit; of workflow nodes, with no limited queue."""
        if limits and persistence.workflows_of(ends):
            return False
        return self._one_statement_of_runs(ends) and self.store._autocommit()

    def _all_runs(self, ends: Sequence[TaskEnd]) -> bool:
        """Every end is a run's own (a function that returned), none a cancel or requeue."""
        return all(e.kind is EndKind.RUN for e in ends)

    def _one_statement_of_runs(self, ends: Sequence[TaskEnd]) -> bool:
        """Runs' ends on PostgreSQL, each of another task: one ``finish_postgres`` statement."""
        return self._all_runs(ends) and len(_distinct_task_groups(ends)) == 1

    @staticmethod
    def _plain_reactions(
        ends: Sequence[TaskEnd], rows: list[WorkflowRow], winners: set[tuple[str, str]]
    ) -> tuple[list[bool], list[tuple[str, WorkflowColumns, tuple[str, ...]]]] | None:
        """Which ends won, and each workflow's new columns and promotions; None if more."""
        won = _won(ends, winners)
        by_id = {row["id"]: row for row in rows}
        winning = [e for e, ok in zip(ends, won, strict=True) if ok]
        # Given no node records: an answer that refuses a node needs them, so is not plain.
        writes = persistence.react(by_id, winning, clock.now())
        if not writes.plain:
            return None
        return won, [(save.workflow_id, save.columns, save.promote) for save in writes.saves]


def _won(ends: Sequence[TaskEnd], winners: set[tuple[str, str]]) -> list[bool]:
    """Which of ``ends`` won, from the (task id, run id) pairs a statement returned."""
    return [(end.task_id, end.run_id) in winners for end in ends]


def _distinct_task_groups(ends: Sequence[TaskEnd]) -> list[list[tuple[int, TaskEnd]]]:
    """Split ends so no group names a task twice (a timeout's end and the run's own)."""
    groups: list[list[tuple[int, TaskEnd]]] = []
    for n, end in enumerate(ends):
        for group in groups:
            if all(other.task_id != end.task_id for _, other in group):
                group.append((n, end))
                break
        else:
            groups.append([(n, end)])
    return groups
