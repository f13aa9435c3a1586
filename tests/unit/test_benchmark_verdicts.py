"""The benchmark's target verdicts: each ratio also round by round, as the runs paired up."""

from __future__ import annotations

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
