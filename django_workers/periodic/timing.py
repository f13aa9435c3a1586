"""When a schedule ticks: a five-field cron in a time zone, or every N seconds.

Cron expressions are evaluated by cronsim, which follows Debian's cron,
daylight saving time included: a job at a wall-clock time that a spring-forward
skips runs right after the jump, and one at a time that a fall-back repeats
runs once, at its first occurrence; jobs that run every hour or more often
follow real time (one tick per real hour, whatever the clocks say). An
interval ticks at the multiples of N seconds since the Unix epoch, so every
process computes the same instants. Every instant returned here is UTC.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from django_workers.bounds import CRON_MAX_LENGTH, SECONDS_MAX, TIME_ZONE_MAX_LENGTH
from django_workers.exceptions import InvalidSchedule

#: The ``@name`` shorthands of cron and the five fields each stands for.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Timing:
    """A schedule's ticks: ``cron`` (five fields, in ``zone``) or ``every`` seconds."""

    cron: str | None
    every: int | None
    zone: tzinfo

    @property
    def interval(self) -> timedelta:
        """The shortest gap two ticks can have: the interval, or a minute for cron."""
        return timedelta(seconds=self.every) if self.every else timedelta(minutes=1)

    def ticks_back(self, until: datetime, after: datetime, limit: int) -> list[datetime]:
        """The ticks in (after, until], newest first, at most ``limit`` of them."""
        found: list[datetime] = []
        for tick in self._backwards(until):
            if tick <= after or len(found) >= limit:
                break
            found.append(tick)
        return found

    def next_after(self, moment: datetime) -> datetime | None:
        """The first tick strictly after ``moment``; None if there is none within 50 years."""
        if self.every is not None:
            return _epoch_floor(moment, self.every) + timedelta(seconds=self.every)
        assert self.cron is not None
        try:
            return next(CronSim(self.cron, moment.astimezone(self.zone))).astimezone(UTC)
        except StopIteration:
            return None

    def _backwards(self, until: datetime) -> Iterator[datetime]:
        if self.every is not None:
            return _every_backwards(until, self.every)
        assert self.cron is not None
        # cronsim steps back one second before it matches: start a second late so that
        # ``until`` itself counts when it is a tick.
        start = until.replace(microsecond=0) + _SECOND
        return (t.astimezone(UTC) for t in CronSim(self.cron, start.astimezone(self.zone), True))


def _epoch_floor(moment: datetime, every: int) -> datetime:
    seconds = int(moment.timestamp()) // every * every
    return datetime.fromtimestamp(seconds, UTC)


def _every_backwards(until: datetime, every: int) -> Iterator[datetime]:
    tick = _epoch_floor(until, every)
    step = timedelta(seconds=every)
    while True:
        yield tick
        tick -= step


def timing_of(cron: str | None, every: int | None, timezone: str) -> Timing:
    """Validate a schedule's timing and return it; InvalidSchedule says what to fix."""
    if (cron is None) == (every is None):
        raise InvalidSchedule(
            'A schedule needs exactly one of "cron" (e.g. "*/5 * * * *") and "every" (seconds).'
        )
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= SECONDS_MAX:
            raise InvalidSchedule(
                f'"every" must be a whole number of seconds from 1 to {SECONDS_MAX} (ten years), '
                f"got {every!r}."
            )
        if timezone != "UTC":
            raise InvalidSchedule(
                f'"timezone" ({timezone!r}) applies to cron schedules only: "every" counts '
                "seconds from the Unix epoch. Use a cron expression to tick at wall-clock times."
            )
        return Timing(None, every, UTC)
    if not isinstance(cron, str) or len(cron) > CRON_MAX_LENGTH:
        raise InvalidSchedule(
            f'"cron" must be a string of at most {CRON_MAX_LENGTH} characters such as '
            f'"*/5 * * * *", got {cron!r}.'
        )
    if not isinstance(timezone, str) or len(timezone) > TIME_ZONE_MAX_LENGTH:
        raise InvalidSchedule(
            f'"timezone" must be an IANA name such as "Europe/Paris", got {timezone!r}.'
        )
    return _cron_timing(cron, timezone)


@functools.lru_cache(maxsize=256)
def _cron_timing(cron: str, timezone: str) -> Timing:
    zone = zone_of(timezone)
    expression = " ".join(cron.split())
    expression = ALIASES.get(expression.lower(), expression)
    fields = expression.split()
    if expression.startswith("@"):
        raise InvalidSchedule(
            f"Unknown cron shorthand {cron!r}; use one of {', '.join(ALIASES)} or five fields."
        )
    if len(fields) != 5:
        hint = ' For seconds, use "every": SECONDS.' if len(fields) == 6 else ""
        raise InvalidSchedule(
            f"A cron expression has five fields (minute hour day month weekday), got "
            f"{len(fields)} in {cron!r}.{hint}"
        )
    try:
        first = next(CronSim(expression, datetime(2000, 1, 1, tzinfo=zone)), None)
    except CronSimError as e:
        raise InvalidSchedule(f"Invalid cron expression {cron!r}: {e}.") from e
    if first is None:
        raise InvalidSchedule(f"The cron expression {cron!r} never matches a date.")
    return Timing(expression, None, zone)


def zone_of(name: object) -> tzinfo:
    """The time zone named ``name`` ("UTC", "Europe/Paris"), else InvalidSchedule."""
    if name == "UTC":
        return UTC
    if not isinstance(name, str) or not name:
        raise InvalidSchedule(
            f'"timezone" must be an IANA name such as "Europe/Paris", got {name!r}.'
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise InvalidSchedule(
            f'Unknown time zone {name!r}; use an IANA name such as "Europe/Paris" or "UTC".'
        ) from e


def describe(cron: str | None, every: int | None, timezone: str) -> str:
    """A schedule's timing in a few words: ``*/5 * * * * Europe/Paris`` or ``every 30 s``."""
    if every is not None:
        return f"every {every} s"
    return f"{cron} {timezone}" if timezone != "UTC" else f"{cron} UTC"
