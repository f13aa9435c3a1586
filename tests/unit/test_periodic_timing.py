"""When schedules tick (cron, aliases, intervals, zones, DST), and which ticks a pass enqueues."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_workers.exceptions import InvalidSchedule
from django_workers.periodic.policy import MAX_CATCH_UP, plan_ticks, tick_key
from django_workers.periodic.timing import timing_of


def utc(*parts: int) -> datetime:
    # The ints fill year, month, day... before tzinfo, which mypy cannot tell of *parts.
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type,misc]


def ticks(cron: str | None, after: datetime, until: datetime, *, every=None, tz="UTC"):
    """Every tick in (after, until], oldest first."""
    return sorted(timing_of(cron, every, tz).ticks_back(until, after, 10_000))


# -- cron and intervals --------------------------------------------------------------------


def test_a_cron_ticks_at_its_minutes_and_counts_a_tick_at_the_very_end() -> None:
    found = ticks("*/20 * * * *", utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 11, 0))
    assert found == [utc(2026, 1, 1, 10, 20), utc(2026, 1, 1, 10, 40), utc(2026, 1, 1, 11, 0)]


@pytest.mark.parametrize(
    ("alias", "fields"),
    [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
     ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"),
     ("@midnight", "0 0 * * *")],
)  # fmt: skip
def test_an_alias_ticks_as_its_five_fields(alias: str, fields: str) -> None:
    start, end = utc(2025, 12, 20), utc(2027, 1, 2)
    assert ticks(alias, start, end) == ticks(fields, start, end)
    assert timing_of(alias.upper(), None, "UTC").cron == fields


def test_an_interval_ticks_at_multiples_of_its_seconds_since_the_epoch() -> None:
    found = ticks(None, utc(2026, 1, 1, 0, 0, 1), utc(2026, 1, 1, 0, 1, 0), every=25)
    assert [t.timestamp() % 25 for t in found] == [0.0, 0.0]
    assert found == [utc(2026, 1, 1, 0, 0, 25), utc(2026, 1, 1, 0, 0, 50)]


def test_next_after_and_ticks_back_agree() -> None:
    for cron, tz in [("*/7 3-5 * * MON-FRI", "Europe/Paris"), ("30 2 * * *", "America/New_York")]:
        timing = timing_of(cron, None, tz)
        moment, forward = utc(2026, 3, 1), []
        while (following := timing.next_after(moment)) is not None and following < utc(2026, 4, 15):
            moment = following
            forward.append(moment)
        assert forward == ticks(
            cron, utc(2026, 3, 1), utc(2026, 4, 15) - timedelta(seconds=1), tz=tz
        )


@pytest.mark.parametrize(
    ("cron", "every", "tz", "message"),
    [
        ("*/5 * * *", None, "UTC", "five fields"),
        ("0 */5 * * * *", None, "UTC", '"every": SECONDS'),
        ("61 * * * *", None, "UTC", "Bad minute"),
        ("0 0 31 2 *", None, "UTC", "Bad day-of-month"),
        ("@reboot", None, "UTC", "Unknown cron shorthand"),
        ("* * * * *", None, "Mars/Olympus", "Unknown time zone"),
        (None, None, "UTC", "exactly one"),
        ("* * * * *", 60, "UTC", "exactly one"),
        (None, 0, "UTC", "whole number of seconds"),
        (None, 1.5, "UTC", "whole number of seconds"),
        (None, 60, "Europe/Paris", "cron schedules only"),
        (["* * * * *"], None, "UTC", "must be a string"),
        (None, 10**10, "UTC", "ten years"),
        ("* " * 150 + "*", None, "UTC", "at most 200 characters"),
        ("* * * * *", None, "Europe/" + "x" * 64, "IANA name"),
    ],
)
def test_a_bad_timing_is_refused_with_what_to_write(cron, every, tz, message) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        timing_of(cron, every, tz)


# -- daylight saving time (Europe/Paris: 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00)


def test_a_daily_tick_in_the_skipped_hour_runs_once_right_after_the_jump() -> None:
    found = ticks("30 2 * * *", utc(2026, 3, 27, 12), utc(2026, 3, 31), tz="Europe/Paris")
    # 02:30 CET on the 28th, 03:00 CEST on the 29th (02:30 does not exist), 02:30 CEST after.
    assert found == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]


def test_a_daily_tick_in_the_repeated_hour_runs_once_at_its_first_occurrence() -> None:
    found = ticks("30 2 * * *", utc(2026, 10, 23), utc(2026, 10, 27), tz="Europe/Paris")
    # 02:30 CEST (00:30 UTC) on the 25th, not again at 02:30 CET an hour later.
    assert found == [
        utc(2026, 10, 23, 0, 30),
        utc(2026, 10, 24, 0, 30),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]


@pytest.mark.parametrize(
    "day", [utc(2026, 3, 28, 20), utc(2026, 10, 24, 20)], ids=["spring", "fall"]
)
def test_an_hourly_schedule_ticks_once_per_real_hour_across_a_change(day: datetime) -> None:
    found = ticks("0 * * * *", day, day + timedelta(hours=12), tz="Europe/Paris")
    assert found == [day + timedelta(hours=n) for n in range(1, 13)]
    assert len({tick_key("hourly", t) for t in found}) == 12


def test_a_dst_day_through_the_planner_enqueues_one_tick_whatever_the_policy() -> None:
    timing = timing_of("30 2 * * *", None, "Europe/Paris")
    for day in (utc(2026, 3, 29, 12), utc(2026, 10, 25, 12)):
        for policy in ("latest", "all"):
            plan = plan_ticks(timing, policy, 86400, day - timedelta(days=1), day)
            assert len(plan.enqueue) == 1, (day, policy, plan)


# -- the catch-up policies ----------------------------------------------------------------

HOURLY = timing_of("0 * * * *", None, "UTC")
NOON = utc(2026, 6, 1, 12)


@pytest.mark.parametrize("policy", ["latest", "all", "none"])
def test_an_on_time_tick_is_enqueued_under_every_policy(policy) -> None:
    plan = plan_ticks(HOURLY, policy, 3600, NOON - timedelta(hours=1), NOON + timedelta(seconds=20))
    assert plan.enqueue == (NOON,)
    assert plan.skipped == ()


@pytest.mark.parametrize(
    ("policy", "enqueued"),
    [("latest", [12]), ("all", [10, 11, 12]), ("none", [])],
)
def test_after_downtime_the_policy_decides_which_missed_ticks_run(policy, enqueued) -> None:
    # Last tick 09:00, back at 12:30: 10:00, 11:00 and 12:00 were missed.
    plan = plan_ticks(HOURLY, policy, 4 * 3600, utc(2026, 6, 1, 9), utc(2026, 6, 1, 12, 30))
    assert [t.hour for t in plan.enqueue] == enqueued
    assert [t.hour for t in plan.skipped] == [h for h in (10, 11, 12) if h not in enqueued]


def test_a_missed_tick_older_than_the_window_never_runs() -> None:
    plan = plan_ticks(HOURLY, "all", 3600, utc(2026, 6, 1, 9), utc(2026, 6, 1, 12, 30))
    assert [t.hour for t in plan.enqueue] == [12]
    plan = plan_ticks(HOURLY, "latest", 3600, utc(2026, 6, 1, 3), utc(2026, 6, 1, 12, 59))
    assert [t.hour for t in plan.enqueue] == [12]
    daily = timing_of("0 3 * * *", None, "UTC")
    plan = plan_ticks(daily, "latest", 3600, utc(2026, 5, 30), utc(2026, 6, 1, 9))
    assert plan.enqueue == ()


def test_latest_leaves_missed_ticks_out_when_one_is_on_time() -> None:
    plan = plan_ticks(HOURLY, "latest", 4 * 3600, utc(2026, 6, 1, 9), NOON + timedelta(seconds=5))
    assert plan.enqueue == (NOON,)
    assert [t.hour for t in plan.skipped] == [10, 11]


def test_all_enqueues_at_most_the_newest_hundred() -> None:
    every_second = timing_of(None, 1, "UTC")
    plan = plan_ticks(every_second, "all", 7200, NOON - timedelta(hours=1), NOON)
    assert len(plan.enqueue) == MAX_CATCH_UP
    assert plan.enqueue[-1] == NOON
    assert plan.enqueue[0] == NOON - timedelta(seconds=MAX_CATCH_UP - 1)


def test_a_short_interval_is_on_time_for_less_than_its_interval() -> None:
    every_ten = timing_of(None, 10, "UTC")
    # 12:00:00 is 12 s late, 12:00:10 is 2 s late: only the second is on time.
    plan = plan_ticks(
        every_ten, "latest", 3600, NOON - timedelta(seconds=10), NOON + timedelta(seconds=12)
    )
    assert plan.enqueue == (NOON + timedelta(seconds=10),)
    assert plan.skipped == (NOON,)


def test_no_tick_at_or_before_the_anchor_is_due() -> None:
    plan = plan_ticks(HOURLY, "all", 86400, NOON, NOON + timedelta(seconds=30))
    assert plan.enqueue == ()


def test_a_tick_key_names_the_schedule_and_the_utc_instant() -> None:
    assert tick_key("refresh-rates", utc(2026, 3, 29, 1, 0)) == (
        "schedule:refresh-rates:2026-03-29T01:00:00Z"
    )
