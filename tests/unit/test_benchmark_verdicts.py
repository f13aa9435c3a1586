"""The benchmark's target verdicts: each ratio also round by round, as the runs paired up."""

from __future__ import annotations

from collections import defaultdict

from benchmarks import run

RAW = {
    "workers-pg": {
        "drain_1": [{"per_second": 1000.0}, {"per_second": 1200.0}, {"per_second": 900.0}],
        "copy_raw": [{"unsupported": True}],
    },
    "procrastinate": {
        "drain_1": [{"per_second": 200.0}, {"per_second": 400.0}, {"per_second": 150.0}],
    },
}


def test_a_ratio_is_taken_within_each_round() -> None:
    ratios = run.round_ratios(RAW, ("workers-pg", "drain_1"), ("procrastinate", "drain_1"))
    assert ratios == [5.0, 3.0, 6.0]
    assert run.by_round(ratios, 5.0, digits=1) == (
        " (round by round: 5.0x, 3.0x, 6.0x; met in 2 of 3)"
    )


def test_an_unsupported_or_single_round_figure_adds_nothing() -> None:
    assert run.round_ratios(RAW, ("workers-pg", "copy_raw"), ("procrastinate", "drain_1")) == []
    assert run.round_ratios(None, ("workers-pg", "drain_1"), ("procrastinate", "drain_1")) == []
    assert run.by_round([5.0], 5.0) == ""


def _ours(**figures: float) -> defaultdict[str, float]:
    """Our summary with only ``figures`` measured (the rest NaN, as an ``--only`` run leaves)."""
    return defaultdict(lambda: float("nan"), figures)


def test_the_wake_up_is_set_against_its_floor_of_the_same_run() -> None:
    lines = run.verdicts(
        {"workers-pg": _ours(latency_p50_ms=3.3, latency_p99_ms=4.6, latency_floor_p50_ms=2.9)}
    )
    assert "- latency: 3.30 / 4.60 ms vs ≤ 3 / ≤ 6 ms (p50 / p99): NOT met" in lines
    assert lines[-1] == (
        "- enqueue → start p50: 3.30 ms, 0.40 ms over the floor's 2.90 ms (the same round "
        "trips without Django or the worker; no target)"
    )


def test_a_floor_over_the_target_is_called_out_and_a_missing_one_adds_nothing() -> None:
    high = run.verdicts(
        {"workers-pg": _ours(latency_p50_ms=3.6, latency_p99_ms=5.0, latency_floor_p50_ms=3.2)}
    )
    assert high[-1].endswith("no target) (the floor itself is over 3 ms)")
    alone = run.verdicts({"workers-pg": _ours(latency_p50_ms=2.5, latency_p99_ms=4.0)})
    assert not any("floor" in line for line in alone)
