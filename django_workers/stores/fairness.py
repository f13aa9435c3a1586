"""Fair queues: the next tasks taken round-robin across owners, the same on every store.

A fair queue (``DJANGO_WORKERS["QUEUES"][name]["fair"] = True``) gives each
owner a turn before any owner gets a second: an owner's k-th ready task in
claim order has turn (its RUNNING tasks in the queue) + k, and a claim takes
the lowest turns first, then priority and age. Global tasks (no owner) count
as one owner. Since the turn counts what already runs, across every worker,
an owner with ten thousand tasks queued first and running does not hold back
another owner's one task: that task's turn is 1. ``per_owner`` caps an
owner's RUNNING tasks in the queue: turns past it are not taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django_workers.stores.rows import claim_order

Row = Mapping[str, Any]


def fair_pick(
    candidates: Iterable[Row],
    running: Mapping[str | None, int],
    slots: int,
    per_owner: int | None,
) -> list[Row]:
    """Up to ``slots`` of one fair queue's ``candidates``, lowest turn first.

    ``candidates`` hold at least each owner's first ready rows (rows with
    ``owner``, ``priority``, ``created_at`` and ``id``); ``running``: RUNNING
    tasks in the queue by owner.
    """
    taken: dict[str | None, int] = {}
    ranked = []
    for row in sorted(candidates, key=claim_order):
        owner = row["owner"]
        taken[owner] = taken.get(owner, 0) + 1
        turn = running.get(owner, 0) + taken[owner]
        if per_owner is not None and turn > per_owner:
            continue
        ranked.append((turn, claim_order(row), row))
    ranked.sort(key=lambda item: item[:2])
    return [row for _turn, _order, row in ranked[:slots]]


def merged(sequences: Sequence[Sequence[Row]]) -> list[Row]:
    """Several queues' candidates as one sequence: at each step the head first in claim order.

    Each sequence keeps its own order (a fair queue's is by turn), so across
    queues priority and age decide as they do in an ordinary claim.
    """
    heads = [0] * len(sequences)
    out: list[Row] = []
    while True:
        best = None
        for n, seq in enumerate(sequences):
            if heads[n] < len(seq) and (
                best is None
                or claim_order(seq[heads[n]]) < claim_order(sequences[best][heads[best]])
            ):
                best = n
        if best is None:
            return out
        out.append(sequences[best][heads[best]])
        heads[best] += 1
