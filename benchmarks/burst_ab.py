"""Two checkouts' long drains side by side: wall time and worker CPU of ``runworkers --burst``.

    .venv/bin/python benchmarks/burst_ab.py BASELINE CANDIDATE [--db postgres] [--count 20000]
        [--rounds 4] [--processes 1] [--fresh]

BASELINE and CANDIDATE are checkouts of the project (``git worktree add
/tmp/base <commit>``); each runs with its own ``.venv`` if it has one, else
with this interpreter. Each round queues ``--count`` no-op tasks in each
checkout's own database (PostgreSQL ``bench_burst_base`` / ``bench_burst_cand``,
made if missing, or made afresh before every drain with ``--fresh``; or a
SQLite file in each checkout's ``benchmarks/results``),
then times ``runworkers --burst --concurrency 10`` (``--processes`` of them at
once) until the queue is empty: the wall time, and the CPU time (user and
system) of the worker processes. The two checkouts take turns in a random
order. At the end it prints the totals over the rounds and the candidate's
change.

``drain_ab.py`` compares ``run.py``'s drain of 5,000 tasks, whose figures move
by 10% or more from one round to the next on a small virtual machine: worker
start-up, the idle CPU subtracted from it and the first claim weigh on a drain
that short. Drains of 20,000 tasks and more, summed over rounds, show a change
of a few per cent in the runtime's cost per task.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.drain_ab import interpreter  # noqa: E402

PG_SERVER = "postgres://postgres@127.0.0.1:5432"
PREFILL = (
    "import os, sys; sys.path.insert(0, os.getcwd()); import django; django.setup(); "
    "from django.core.management import call_command; call_command('migrate', verbosity=0); "
    "from benchmarks import driver; driver.prefill({count})"
)


def environment(checkout: Path, db: str, name: str) -> dict[str, str]:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="benchmarks.settings")
    env.pop("BENCH_LISTEN_URL", None)
    if db == "postgres":
        env["DATABASE_URL"] = f"{PG_SERVER}/bench_burst_{name}"
    else:
        env.pop("DATABASE_URL", None)
        # The SQLite file lives in the checkout's results folder, which git does not keep.
        (checkout / "benchmarks" / "results").mkdir(exist_ok=True)
    return env


def make_database(name: str, fresh: bool = False) -> None:
    """Create the database ``name`` if missing; with ``fresh``, drop it first."""
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
        if fresh:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not found:
            conn.execute(f'CREATE DATABASE "{name}"')


def one_drain(
    checkout: Path, env: dict[str, str], count: int, processes: int
) -> tuple[float, float]:
    """Queue ``count`` tasks, drain them; the wall time and the workers' CPU seconds."""
    python = interpreter(checkout)
    subprocess.run(
        [python, "-c", PREFILL.format(count=count)],
        cwd=checkout,
        env=env,
        check=True,
        capture_output=True,
        timeout=900,
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    workers = [
        subprocess.Popen(
            [python, "-m", "django", "runworkers", "--burst", "--concurrency", "10"],
            cwd=checkout,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]
    codes = [worker.wait(timeout=900) for worker in workers]
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if any(codes):
        raise SystemExit(f"{checkout}: runworkers exited {codes}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="PostgreSQL: drop and make each database before every drain (no dead rows carried)",
    )
    args = parser.parse_args(argv)
    sides = {"base": args.baseline.resolve(), "cand": args.candidate.resolve()}
    for checkout in sides.values():
        if not (checkout / "benchmarks" / "driver.py").exists():
            parser.error(f"{checkout} is not a checkout of the project (no benchmarks/driver.py)")
    if args.db == "postgres":
        for name in sides:
            make_database(f"bench_burst_{name}")
    totals = {name: [0.0, 0.0] for name in sides}
    for round_no in range(1, args.rounds + 1):
        order = list(sides)
        random.shuffle(order)
        line = []
        for name in order:
            if args.fresh and args.db == "postgres":
                make_database(f"bench_burst_{name}", fresh=True)
            wall, cpu = one_drain(
                sides[name], environment(sides[name], args.db, name), args.count, args.processes
            )
            totals[name][0] += wall
            totals[name][1] += cpu
            line.append(f"{name} {args.count / wall:,.0f}/s ({cpu * 1e6 / args.count:.0f} µs CPU)")
        print(f"round {round_no}: " + ", ".join(sorted(line)), flush=True)
    tasks = args.count * args.rounds
    print(
        f"\n{args.rounds} rounds of {args.count:,} tasks, {args.processes} process(es), {args.db}"
    )
    print(f"{'figure':34} {'baseline':>10} {'candidate':>10} {'change':>8}")
    base_wall, base_cpu = totals["base"]
    cand_wall, cand_cpu = totals["cand"]
    for label, base, cand, higher_is_better in (
        ("drain (tasks/s)", tasks / base_wall, tasks / cand_wall, True),
        ("worker CPU per task (µs)", base_cpu * 1e6 / tasks, cand_cpu * 1e6 / tasks, False),
    ):
        change = (cand - base) / base * 100
        worse = -change if higher_is_better else change
        flag = "  slower" if worse > 5 else ""
        print(f"{label:34} {base:>10,.1f} {cand:>10,.1f} {change:>+7.1f}%{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
