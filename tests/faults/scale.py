"""How big and how long each fault test is: the suite's sizes, or the full ones.

``WORKERS_FAULTS=full`` runs the long variants that docs/reliability.md
quotes (a 60 s outage under the default 30 s lease, 5,000 tasks and 100
workflows under kill -9, ...); without it the suite's sizes keep all the fault
tests together within about three minutes on two cores. Each figure can also
be set alone with the variables that ``current()`` reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    """The sizes and durations of one fault-suite run."""

    name: str
    #: Seconds of connection cuts in the middle of a drain.
    cut_seconds: float
    #: Seconds the server stays stopped.
    outage_seconds: float
    #: LEASE_TIMEOUT and HEARTBEAT_INTERVAL of the workers during an outage (None: defaults).
    outage_lease: tuple[float, float] | None
    #: Short tasks drained while each of three workers is stopped and restarted in turn.
    rolling_tasks: int
    #: Plain tasks and ten-node workflows drained while workers are killed.
    chaos_tasks: int
    chaos_workflows: int
    #: Seconds between two kills of the chaos driver (drawn uniformly in this range).
    chaos_kill_every: tuple[float, float]


SUITE = Scale(
    name="suite",
    cut_seconds=10.0,
    outage_seconds=10.0,
    # A 10 s outage is longer than a 4 s lease: what a 60 s one does under the default 30 s.
    outage_lease=(4.0, 1.0),
    rolling_tasks=1200,
    chaos_tasks=1000,
    chaos_workflows=20,
    chaos_kill_every=(1.0, 3.0),
)

FULL = Scale(
    name="full",
    cut_seconds=10.0,
    outage_seconds=60.0,
    outage_lease=None,
    rolling_tasks=3000,
    chaos_tasks=5000,
    chaos_workflows=100,
    chaos_kill_every=(1.0, 3.0),
)


def current() -> Scale:
    """``FULL`` when WORKERS_FAULTS=full, else ``SUITE``; single figures from their variables."""
    base = FULL if os.environ.get("WORKERS_FAULTS", "").lower() == "full" else SUITE
    lease = os.environ.get("WORKERS_FAULTS_LEASE")  # "default", or "LEASE,HEARTBEAT"
    outage_lease = base.outage_lease
    if lease == "default":
        outage_lease = None
    elif lease:
        timeout, heartbeat = (float(x) for x in lease.split(","))
        outage_lease = (timeout, heartbeat)
    return Scale(
        name=base.name,
        cut_seconds=_number("WORKERS_FAULTS_CUT_SECONDS", base.cut_seconds),
        outage_seconds=_number("WORKERS_FAULTS_OUTAGE_SECONDS", base.outage_seconds),
        outage_lease=outage_lease,
        rolling_tasks=int(_number("WORKERS_FAULTS_ROLLING_TASKS", base.rolling_tasks)),
        chaos_tasks=int(_number("WORKERS_FAULTS_CHAOS_TASKS", base.chaos_tasks)),
        chaos_workflows=int(_number("WORKERS_FAULTS_CHAOS_WORKFLOWS", base.chaos_workflows)),
        chaos_kill_every=base.chaos_kill_every,
    )


def _number(variable: str, default: float) -> float:
    value = os.environ.get(variable)
    return float(value) if value else default
