"""How a store gets the workflow engine's whole answer, the same on every store.

The engine (``engine.persistence``) answers from the rows it is given. When its
answer refuses a node whose record it was not given, it only lists the records
it needs: the store reads them and asks again. The refusals of a whole answer
are fenced ends, written first; one loses its fence only to a claim that came
in after the read, so the store reads the refused records again and asks
again, and the engine then takes that node as started. The answer returned has
had its refusals written; the store writes the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from django_workers.core import LiveNodeRow
from django_workers.engine.persistence import NodeRecords, WorkflowWrites
from django_workers.lifecycle import TaskEnd

#: How many answers a store asks for before it gives up (rolling its transaction back).
#: The usual end takes one; a refusal two (its records read); a lost refusal one more.
MOST_ANSWERS: Final = 10


def answered(
    ask: Callable[[NodeRecords], WorkflowWrites | None],
    read: Callable[[Sequence[str]], Iterable[LiveNodeRow]],
    refuse: Callable[[Sequence[TaskEnd]], list[bool]],
) -> WorkflowWrites | None:
    """The engine's whole answer (``ask`` given the records read so far), its refusals written.

    None if the engine answers None (a cancel of a workflow that has ended).

    ``read`` gives the node records of task ids that exist; ``refuse`` writes ends
    through the store's fenced end rules, without reacting to them, and says which won.
    """
    records: dict[str, LiveNodeRow | None] = {}
    for _ in range(MOST_ANSWERS):
        writes = ask(records)
        if writes is None:
            return None
        wanted = writes.needs
        if not wanted:
            if not writes.refusals or all(refuse(writes.refusals)):
                return writes
            # Read again every refused record: the ones that won read ended, and are
            # left alone; the ones that lost read as the claim left them.
            wanted = tuple(end.task_id for end in writes.refusals)
        records.update(dict.fromkeys(wanted))
        records.update((record["id"], record) for record in read(wanted))
    raise RuntimeError(
        f"A workflow's node records changed under {MOST_ANSWERS} answers of the engine in a row."
    )
