"""Two checkouts' drains side by side, taking turns on the same machine.

    .venv/bin/python benchmarks/drain_ab.py BASELINE CANDIDATE [--rounds 8] [--db postgres]

BASELINE and CANDIDATE are checkouts of the project (``git worktree add
/tmp/base <commit>`` makes one; each may hold its own ``.venv``, else this
checkout's interpreter runs it). Each round runs ``benchmarks/run.py --only
drain --runs 1`` of both, in a random order, each on a database of its own
(``bench_ab_base``, ``bench_ab_cand``), and reads the figures from the
checkout's ``benchmarks/results/latest.json``. At the end it prints, for each
drain figure, both medians over the rounds and the candidate's change.

Two separate ``run.py`` runs minutes apart differ by several per cent on a
small virtual machine, because whatever else the machine does moves between
them; taking turns puts both checkouts under the same conditions, so a change
of a few per cent shows. Run it with the same checkout twice to see the noise
that is left.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FIGURES = (
    ("drain_1_per_s", "drain 5,000, 1 process (tasks/s)", True),
    ("drain_1_steady_per_s", "  from the first task's start", True),
    ("drain_2_per_s", "drain 5,000, 2 processes (tasks/s)", True),
    ("drain_2_steady_per_s", "  from the first task's start", True),
    ("drain_1_worker_cpu_ms_per_task", "worker CPU per task, 1 process (ms)", False),
)


def interpreter(checkout: Path) -> str:
    own = checkout / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def one_drain(checkout: Path, db: str, prefix: str) -> dict[str, float]:
    """One ``run.py --only drain --runs 1`` of a checkout; its summary figures."""
    command = [
        interpreter(checkout),
        "benchmarks/run.py",
        "--db",
        db,
        "--only",
        "drain",
        "--runs",
        "1",
        "--pg-db-prefix",
        prefix,
    ]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: run.py failed ({done.returncode}):\n{done.stdout[-3000:]}")
    data = json.loads((checkout / "benchmarks" / "results" / "latest.json").read_text())
    [summary] = data["summary"].values()
    return {key: float(summary[key]) for key, _, _ in FIGURES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="postgres")
    args = parser.parse_args(argv)
    sides = {
        "baseline": (args.baseline.resolve(), "bench_ab_base"),
        "candidate": (args.candidate.resolve(), "bench_ab_cand"),
    }
    for checkout, _ in sides.values():
        if not (checkout / "benchmarks" / "run.py").exists():
            parser.error(f"{checkout} is not a checkout of the project (no benchmarks/run.py)")
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for round_no in range(1, args.rounds + 1):
        order = list(sides)
        random.shuffle(order)
        for name in order:
            checkout, prefix = sides[name]
            seen[name].append(one_drain(checkout, args.db, prefix))
        print(
            f"round {round_no}: "
            + ", ".join(f"{name} {seen[name][-1]['drain_1_per_s']:,.0f}/s" for name in sides),
            flush=True,
        )
    print(f"\nmedians of {args.rounds} rounds on {args.db}")
    print(f"{'figure':40} {'baseline':>10} {'candidate':>10} {'change':>8}")
    for key, label, higher_is_better in FIGURES:
        base = statistics.median(r[key] for r in seen["baseline"])
        cand = statistics.median(r[key] for r in seen["candidate"])
        change = (cand - base) / base * 100 if base else float("nan")
        worse = -change if higher_is_better else change
        flag = "  slower" if worse > 5 else ""
        print(f"{label:40} {base:>10,.2f} {cand:>10,.2f} {change:>+7.1f}%{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
