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


def merged(ordinary: Sequence[Row], fair: Sequence[Sequence[Row]]) -> list[Row]:
    """Every queue's candidates in the order a claim takes them.

    ``ordinary``: the other queues' candidates; ``fair``: each fair queue's picks
    in turn order (``fair_pick``). A fair queue's picks take the places in claim
    order that the same tasks hold among themselves: across queues, priority and
    age decide as in an ordinary claim, and turns decide which of a fair queue's
    tasks fill its places.
    """
    keyed = [(claim_order(row), row) for row in ordinary]
    for picks in fair:
        keyed += zip(sorted(claim_order(row) for row in picks), picks, strict=True)
    keyed.sort(key=lambda item: item[0])
    return [row for _place, row in keyed]
