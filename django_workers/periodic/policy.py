"""Which ticks a scheduler pass enqueues: on-time ticks always, missed ones by policy.

A tick is *due* once its instant has passed and it is later than the
schedule's last enqueued tick (and than the moment the schedule was created
or enabled again). A due tick is *on time* while it is late by less than the
schedule's interval, and never by more than ``ON_TIME`` (a minute): the
scheduler runs every half second, so only a cluster that was down, or
stalled, leaves a tick later than that. Other due ticks were *missed*:

- ``"latest"``: when no tick is on time, the newest missed tick runs, once;
- ``"all"``: every missed tick runs, oldest first, at most ``MAX_CATCH_UP``;
- ``"none"``: missed ticks never run.

A missed tick older than the schedule's catch-up window is never enqueued,
whatever the policy. Everything here is pure: the clock is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django_workers.periodic.declarations import CatchUp
from django_workers.periodic.timing import Timing

#: The most a tick may be late and still be on time (less for shorter intervals).
ON_TIME = timedelta(minutes=1)
#: The most ticks one pass enqueues for one schedule (the newest, under "all").
MAX_CATCH_UP = 100


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What a pass does with a schedule's due ticks (UTC instants, oldest first)."""

    enqueue: tuple[datetime, ...]
    #: Missed ticks the policy leaves out (within the window; older ones are not looked at).
    skipped: tuple[datetime, ...]


def plan_ticks(
    timing: Timing, catch_up: CatchUp, window: float, after: datetime, now: datetime
) -> TickPlan:
    """Decide which ticks in (``after``, ``now``] to enqueue under ``catch_up``."""
    on_time = min(ON_TIME, timing.interval)
    horizon = max(timedelta(seconds=window), on_time)
    due = timing.ticks_back(until=now, after=max(after, now - horizon), limit=MAX_CATCH_UP)
    fresh = [tick for tick in due if now - tick < on_time]
    missed = [tick for tick in due if now - tick >= on_time]
    if catch_up == "all":
        chosen = due
    elif catch_up == "latest":
        chosen = fresh or missed[:1]
    else:
        chosen = fresh
    return TickPlan(
        enqueue=tuple(sorted(chosen)),
        skipped=tuple(sorted(tick for tick in missed if tick not in chosen)),
    )


def tick_key(schedule_key: str, tick: datetime) -> str:
    """The task key of one tick: the schedule's key and the tick's UTC instant."""
    return f"schedule:{schedule_key}:{tick.strftime('%Y-%m-%dT%H:%M:%SZ')}"
