"""Benchmark django-workers on SQLite and PostgreSQL, side by side with the performance anchors.

Usage (from the repository root, with the project's virtualenv):

    .venv/bin/python benchmarks/run.py [--db sqlite|postgres|all] [--anchors] [--quick] [--memory]

Figures, each the median of 3 runs (1 with --quick):

- enqueue one by one: ``submit_task`` in a loop, each call in autocommit, for
  ``System()`` tasks (global keys) and for ``Owner`` tasks (the user's keys).
  The anchors have no owners: their one enqueue (django-tasks-db's
  ``enqueue()``, Procrastinate's ``defer()``) is what both are compared with;
- enqueue inside a transaction: the same loop inside one ``transaction.atomic()``
  block, its COMMIT included (Procrastinate's ``defer()`` through its Django
  connector, checked to run inside the Django transaction);
- bulk enqueue: ``submit_tasks`` of 10,000 tasks in batches of 1,000, against
  Procrastinate's ``batch_defer`` and, as the floor, a raw ``COPY`` of the same
  rows (built before the clock starts) into our table, with its indexes and
  NOTIFY trigger, one COPY per batch in autocommit (PostgreSQL only);
- drain: 5,000 queued no-op tasks run by 1 and by 2 separate
  ``runworkers --burst --concurrency 10`` subprocesses, from their launch to
  the last task's ``finished_at`` (also shown from the first task's start,
  i.e. without process start-up);
- enqueue -> start latency on an idle, already running worker: one probe task
  at a time, spaced out; the probe writes ``time.time()`` when it starts;
  on PostgreSQL, right after ours in each round, its floor: the same probes
  submitted by a bare call of the insert function and claimed by
  ``benchmarks/wake_floor.py`` on the connection that received the NOTIFY,
  without Django or the worker (the time its claim returned);
- worker CPU per task: user+sys time of the worker processes (from
  ``wait4``) during the drain, less the CPU of starting and stopping an idle
  worker, divided by the task count; and the whole machine's CPU per task.

With ``--memory``, also each worker's resident memory, idle and over a long
drain (see ``benchmarks/memory.py``, which also runs alone).

With ``--anchors`` (PostgreSQL only) the same figures are measured, in the same
run, for django-tasks-db's ``db_worker`` and for Procrastinate's worker
(concurrency 10). They are installed into ``benchmarks/.venv-anchors`` (never
the project's venv) and use their own database, ``bench_anchors``; ours uses
``bench``. Both are dropped and created afresh by every run (so the schema is
the one the current migrations make); the test database is never touched.
``--pg-db-prefix NAME`` (or ``BENCH_PG_DB_PREFIX``) renames them ``NAME`` and
``NAME_anchors`` (and the SQLite file), so two runs on one machine do not drop
each other's databases; the name must start with ``bench``. ``--only enqueue``
measures the enqueue figures alone (a few seconds), ``--only latency`` the
wake-up figures alone, ``--only drain`` the drains of 1 and 2 processes alone.

Environment: ``BENCH_PG_URL`` is the server (default
``postgres://postgres@127.0.0.1:5432``; the database name is replaced);
``BENCH_PG_DB_PREFIX`` is the default of ``--pg-db-prefix``;
``BENCH_ANCHORS_PYTHON`` the interpreter that builds the anchors' venv.
Results: a table on stdout, and JSON + markdown in ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import resource
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import (  # noqa: E402
    DEFAULT_DB_PREFIX,
    DEFAULT_PG,
    LOGS,
    OUR_CONCURRENCY,
    PROCRASTINATE_CONCURRENCY,
    RESULTS,
    WORK,
    BenchError,
    Target,
    build_targets,
    compile_sources,
    drive,
    machine_busy,
    machine_info,
    markdown_table,
    reap,
    say,
    spawn,
    stop,
    text_table,
)

#: Extra drains of ours on PostgreSQL at other --concurrency values (full runs only).
SWEEP_CONCURRENCY = (4, 8, 16, 32)


@dataclass(frozen=True)
class Sizes:
    runs: int
    enqueue: int
    bulk: int
    bulk_batch: int
    drain: int
    #: Latency samples per run for a worker woken by NOTIFY; a polling worker
    #: gets about latency_poll_budget seconds' worth (at most as many).
    latency_fast: int
    latency_poll_budget: float
    sweep: bool


FULL = Sizes(
    runs=3,
    enqueue=2000,
    bulk=10000,
    bulk_batch=1000,
    drain=5000,
    latency_fast=200,
    latency_poll_budget=15.0,
    sweep=True,
)
QUICK = Sizes(
    runs=1,
    enqueue=300,
    bulk=2000,
    bulk_batch=1000,
    drain=1000,
    latency_fast=40,
    latency_poll_budget=6.0,
    sweep=False,
)


# -- the measurements -----------------------------------------------------------------


def measure_enqueue(
    target: Target, sizes: Sizes, run: int, owner: bool = False, atomic: bool = False
) -> dict[str, Any]:
    """``count`` enqueues one by one, in autocommit or in one ``transaction.atomic()`` block.

    ``owner``: ours with ``Owner`` authority; the anchors have no owners, so not theirs.
    """
    ours = target.key.startswith("workers")
    if owner and not ours:
        return {"unsupported": True}
    reset_and_settle(target)
    if not ours:
        return drive(target, "enqueue_single", count=sizes.enqueue, atomic=atomic)
    authority = "owner" if owner else "system"
    return drive(target, "enqueue_single", count=sizes.enqueue, authority=authority, atomic=atomic)


def measure_copy(target: Target, sizes: Sizes, run: int) -> dict[str, Any]:
    """The bulk figure's floor: a raw COPY of the same rows into our table (PostgreSQL)."""
    if target.key != "workers-pg":
        return {"unsupported": True}
    reset_and_settle(target)
    return drive(target, "copy_raw", count=sizes.bulk, batch=sizes.bulk_batch)


def measure_bulk(target: Target, sizes: Sizes, run: int) -> dict[str, Any]:
    reset_and_settle(target)
    return drive(target, "enqueue_bulk", count=sizes.bulk, batch=sizes.bulk_batch)


def measure_idle_worker(target: Target, sizes: Sizes, run: int) -> dict[str, Any]:
    """Start a burst worker on an empty queue: the start-up and shutdown cost in CPU and time."""
    drive(target, "reset")
    log = LOGS / f"{target.key}-idle-{run}.log"
    started = time.time()
    proc = spawn(target, target.worker_command(burst=True), log)
    codes, cpu = reap([proc], 120)
    if codes != [0]:
        raise BenchError(f"{target.label}: an idle burst worker exited with {codes}; see {log}")
    return {"cpu": cpu, "wall": time.time() - started}


def measure_drain(
    target: Target,
    count: int,
    processes: int,
    run: int,
    concurrency: int | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Queue ``count`` no-op tasks, run ``processes`` burst workers, time the drain.

    ``quiet``: our worker at ``--verbosity 0``, without its line per finished task.
    """
    drive(target, "prefill", count=count)
    suffix = (f"c{concurrency}-" if concurrency else "") + ("quiet-" if quiet else "")
    logs = [LOGS / f"{target.key}-drain{processes}-{suffix}{run}-{n}.log" for n in range(processes)]
    cmd = target.worker_command(burst=True, concurrency=concurrency)
    if quiet:
        cmd += ["--verbosity", "0"]
    busy_before = machine_busy()
    launched = time.time()
    procs = [spawn(target, cmd, log) for log in logs]
    codes, cpu = reap(procs, 900)
    exited = time.time()
    busy = machine_busy() - busy_before
    stats = drive(target, "drain_stats")
    if stats["completed"] != count or any(codes):
        raise BenchError(
            f"{target.label}: drain of {count} with {processes} process(es) ended with "
            f"{stats['statuses']} and exit codes {codes}; see {logs[0]}"
        )
    total = stats["last_finish"] - launched
    steady = stats["last_finish"] - stats["first_start"]
    return {
        "count": count,
        "processes": processes,
        "seconds": total,
        "per_second": count / total,
        "steady_seconds": steady,
        "steady_per_second": count / steady,
        "exit_seconds": exited - launched,
        "worker_cpu": cpu,
        "machine_cpu": busy,
    }


def reset_and_settle(target: Target) -> None:
    """Empty the target's tables, then ``settle_machine``: before a figure bound by the disk."""
    drive(target, "reset")
    settle_machine(target)


def settle_machine(target: Target, limit: float = 60.0) -> None:
    """Let the work earlier figures left behind finish before a disk-bound figure starts.

    The drains and bulk enqueues before it leave autovacuum, a checkpoint's
    writes and the page cache's write-back running for a while; whichever
    system is measured first after them would wait on the disk more than the
    next. The wake-up figure and every enqueue figure wait on commits' flushes:
    in one run without this, ours one by one measured 901/s right after the
    bulk figures and 1,478/s (``Owner`` tasks) ten seconds on. So, for every
    system alike: wait (up to ``limit`` seconds) until no autovacuum worker is
    running on the server, ``CHECKPOINT``, and flush the page cache to disk.
    """
    settle_database(target.db, target.db_url, limit)


def settle_database(db: str, db_url: str, limit: float = 60.0) -> None:
    """``settle_machine`` for the database at ``db_url`` (``db``: "postgresql" or "sqlite")."""
    if db == "postgresql":
        import psycopg

        deadline = time.monotonic() + limit
        with psycopg.connect(db_url, autocommit=True, connect_timeout=5) as c:
            busy = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
            while (c.execute(busy).fetchone() or (0,))[0] and time.monotonic() < deadline:
                time.sleep(0.2)
            with contextlib.suppress(psycopg.Error):  # CHECKPOINT needs a superuser
                c.execute("CHECKPOINT")
    os.sync()


def measure_latency(target: Target, sizes: Sizes, run: int) -> dict[str, Any]:
    """Start one worker, let it go idle, then time one probe task at a time."""
    # A random wait between samples; for a polling worker it spans a whole poll
    # period, so the samples meet its poll at every phase, not always the same one.
    if target.poll is None:
        gap, samples = [0.02, 0.05], sizes.latency_fast
    else:
        gap = [0.02, 0.02 + target.poll]
        samples = min(sizes.latency_fast, max(8, int(sizes.latency_poll_budget / target.poll)))
    command = target.worker_command(burst=False)
    return time_probes(target, run, "latency", lambda _probe: command, samples, gap)


def measure_latency_floor(target: Target, sizes: Sizes, run: int) -> dict[str, Any]:
    """The wake-up's floor on PostgreSQL: ``benchmarks.wake_floor`` in place of a worker.

    The same probes, gaps and samples as ``measure_latency``; the submit is a
    bare call of the insert function and the claim is made on the connection
    that received the NOTIFY, with nothing of the worker's around it.
    """
    if target.key != "workers-pg":
        return {"unsupported": True}

    def command(probe: Path) -> list[str]:
        return [target.python, "-m", "benchmarks.wake_floor", str(probe)]

    return time_probes(target, run, "latency_floor", command, sizes.latency_fast, [0.02, 0.05])


def time_probes(
    target: Target,
    run: int,
    action: str,
    command: Callable[[Path], list[str]],
    samples: int,
    gap: list[float],
) -> dict[str, Any]:
    """Start ``command(probe file)``, then let the driver's ``action`` time its probes.

    The process runs from an emptied, settled database until the driver's answer,
    then is stopped; an exit other than the stop's own is reported.
    """
    reset_and_settle(target)
    WORK.mkdir(parents=True, exist_ok=True)
    name = action.replace("_", "-")
    probe = WORK / f"{name}-{target.key}-{run}.txt"
    log = LOGS / f"{target.key}-{name}-{run}.log"
    proc = spawn(target, command(probe), log)
    try:
        answer = drive(target, action, path=str(probe), samples=samples, gap=gap, timeout=15.0)
    finally:
        code, _cpu = stop(proc)
    if code not in (0, -signal.SIGTERM, 1):
        say(f"note: {target.label} {name} process exited with {code} after SIGTERM (see {log})")
    return answer


# -- the run ---------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


#: The figures each ``--only`` choice measures.
ONLY_FIGURES = {
    "enqueue": (
        "enqueue_single",
        "enqueue_single_owner",
        "enqueue_atomic",
        "enqueue_atomic_owner",
        "enqueue_bulk",
        "copy_raw",
    ),
    "latency": ("latency", "latency_floor"),
    "drain": ("drain_1", "drain_2"),
}


def run_all(targets: list[Target], sizes: Sizes, only: str = "all") -> dict[str, Any]:
    """Every figure for every target, run by run, targets interleaved within each run."""
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {t.key: {} for t in targets}
    setup = {t.key: drive(t, "migrate") for t in targets}

    def record(target: Target, figure: str, answer: dict[str, Any]) -> None:
        raw[target.key].setdefault(figure, []).append(answer)

    # Each phase runs its figures round by round, every target in turn and, within a
    # target, the phase's figures one after another. The Owner figures share a phase with
    # the System ones: the anchors have no owners, so both of ours are compared with the
    # anchor's one figure, which must be measured in the same minutes as each.
    phases: list[list[tuple[str, Any]]] = [
        [("idle_worker", lambda t, r: measure_idle_worker(t, sizes, r))],
        [
            ("enqueue_single", lambda t, r: measure_enqueue(t, sizes, r)),
            ("enqueue_single_owner", lambda t, r: measure_enqueue(t, sizes, r, owner=True)),
        ],
        [
            ("enqueue_atomic", lambda t, r: measure_enqueue(t, sizes, r, atomic=True)),
            (
                "enqueue_atomic_owner",
                lambda t, r: measure_enqueue(t, sizes, r, owner=True, atomic=True),
            ),
        ],
        # Our bulk figure is compared with the raw COPY too: each round measures it
        # right after ours (for the anchors it is "not supported" at once).
        [
            ("enqueue_bulk", lambda t, r: measure_bulk(t, sizes, r)),
            ("copy_raw", lambda t, r: measure_copy(t, sizes, r)),
        ],
        [("drain_1", lambda t, r: measure_drain(t, sizes.drain, 1, r))],
        [("drain_2", lambda t, r: measure_drain(t, sizes.drain, 2, r))],
        # The floor right after ours, in the same round: the machine's state of that moment.
        [
            ("latency", lambda t, r: measure_latency(t, sizes, r)),
            ("latency_floor", lambda t, r: measure_latency_floor(t, sizes, r)),
        ],
    ]
    if only != "all":
        phases = [
            [(figure, measure) for figure, measure in phase if figure in ONLY_FIGURES[only]]
            for phase in phases
        ]
    for phase in filter(None, phases):
        for run in range(sizes.runs):
            for target in targets:
                for figure, measure in phase:
                    started = time.monotonic()
                    load = os.getloadavg()[0]
                    answer = {**measure(target, run), "load_before": load}
                    record(target, figure, answer)
                    say(
                        f"{figure:<15} run {run + 1}/{sizes.runs}  {target.label:<40} "
                        f"{brief(answer)}  ({time.monotonic() - started:.1f} s)"
                    )
    sweep: dict[str, Any] = {}
    quiet: list[dict[str, Any]] = []
    pg_ours = next((t for t in targets if t.key == "workers-pg"), None)
    if sizes.sweep and pg_ours is not None and only == "all":
        for concurrency in SWEEP_CONCURRENCY:
            answer = measure_drain(pg_ours, sizes.drain, 1, 0, concurrency=concurrency)
            sweep[str(concurrency)] = answer
            say(f"{'sweep':<15} --concurrency {concurrency:<3} {pg_ours.label:<27} {brief(answer)}")
        # The anchors' workers print nothing per task by default; ours prints a line per
        # end. The same drain without those lines says what they cost.
        for run in range(sizes.runs):
            answer = measure_drain(pg_ours, sizes.drain, 1, run, quiet=True)
            quiet.append(answer)
            progress = f"run {run + 1}/{sizes.runs}"
            say(f"{'drain -v 0':<15} {progress}  {pg_ours.label:<27} {brief(answer)}")
    return {"setup": setup, "raw": raw, "sweep": sweep, "quiet": quiet}


def brief(answer: dict[str, Any]) -> str:
    if answer.get("unsupported"):
        return "not supported"
    if "p50_ms" in answer:
        return (
            f"p50 {answer['p50_ms']:.1f} ms  p99 {answer['p99_ms']:.1f} ms (n={answer['samples']})"
        )
    if "worker_cpu" in answer:
        return (
            f"{answer['per_second']:,.0f}/s ({answer['steady_per_second']:,.0f}/s steady), "
            f"worker CPU {answer['worker_cpu']:.2f} s"
        )
    if "per_second" in answer:
        return f"{answer['per_second']:,.0f}/s"
    if "cpu" in answer:
        return f"CPU {answer['cpu']:.2f} s, {answer['wall']:.2f} s"
    return json.dumps(answer)


def summarize(targets: list[Target], data: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    """Medians over the runs of every figure, per target (None: not measured or not supported)."""
    summary: dict[str, Any] = {}
    nan = float("nan")
    for target in targets:
        raw = data["raw"][target.key]

        def med(figure: str, key: str, raw: dict[str, Any] = raw) -> float | None:
            answers = raw.get(figure)
            if not answers or answers[0].get("unsupported"):
                return None
            return median([a[key] for a in answers])

        idle_cpu = med("idle_worker", "cpu")
        figures: dict[str, Any] = {
            "idle_worker_cpu_s": nan if idle_cpu is None else idle_cpu,
            "idle_worker_wall_s": med("idle_worker", "wall") or nan,
        }
        for figure in ONLY_FIGURES["enqueue"]:
            figures[f"{figure}_per_s"] = med(figure, "per_second")
        for procs in (1, 2):
            runs = raw.get(f"drain_{procs}", [])
            figures[f"drain_{procs}_per_s"] = median([a["per_second"] for a in runs])
            figures[f"drain_{procs}_steady_per_s"] = median([a["steady_per_second"] for a in runs])
            figures[f"drain_{procs}_worker_cpu_ms_per_task"] = median(
                [(a["worker_cpu"] - procs * (idle_cpu or 0)) * 1000 / a["count"] for a in runs]
            )
            figures[f"drain_{procs}_worker_cpu_ms_per_task_gross"] = median(
                [a["worker_cpu"] * 1000 / a["count"] for a in runs]
            )
            figures[f"drain_{procs}_machine_cpu_ms_per_task"] = median(
                [a["machine_cpu"] * 1000 / a["count"] for a in runs]
            )
        latency = raw.get("latency", [])
        floor = [a for a in raw.get("latency_floor", []) if not a.get("unsupported")]
        for pct in ("p50", "p95", "p99"):
            figures[f"latency_{pct}_ms"] = median([a[f"{pct}_ms"] for a in latency])
            figures[f"latency_floor_{pct}_ms"] = median([a[f"{pct}_ms"] for a in floor])
        figures["latency_samples"] = sum(a["samples"] for a in latency)
        figures["latency_missing"] = sum(a["missing"] for a in latency)
        summary[target.key] = figures
    return summary


# -- reporting -------------------------------------------------------------------------

PERFORMANCE_TARGETS = {
    "drain_1_per_s": ("≥ 1,500/s", lambda v: v >= 1500),
    "drain_2_per_s": ("≥ 2,400/s", lambda v: v >= 2400),
    "enqueue_single_per_s": ("≥ 2,000/s", lambda v: v >= 2000),
    "enqueue_bulk_per_s": ("≥ 25,000/s", lambda v: v is not None and v >= 25000),
    "latency": ("≤ 3 / ≤ 6 ms (p50 / p99)", None),
    "drain_1_worker_cpu_ms_per_task": ("≤ 0.5 ms", lambda v: v <= 0.5),
}


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "-"
    return "-" if value != value else f"{value:,.0f}/s"  # NaN: not measured


def fmt_ms(value: float) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def table_rows(
    targets: list[Target], summary: dict[str, Any], sizes: Sizes
) -> tuple[list[str], list[list[str]]]:
    headers = ["figure", *(t.label for t in targets), "performance target (PostgreSQL)"]
    n = f"{sizes.drain:,}"

    def row(name: str, fmt: Any, key: str, target: str = "") -> list[str]:
        return [name, *(fmt(summary[t.key], key) for t in targets), target]

    rate = lambda s, k: fmt_rate(s[k])  # noqa: E731
    cpu = lambda s, k: fmt_ms(s[k])  # noqa: E731

    def lat(s: dict[str, Any], k: str) -> str:
        return " / ".join(fmt_ms(s[f"{k}_{p}_ms"]) for p in ("p50", "p95", "p99"))

    rows = [
        row(f"drain {n} queued, 1 process", rate, "drain_1_per_s", "≥ 1,500/s"),
        row("  (same, from the first task's start)", rate, "drain_1_steady_per_s"),
        row(f"drain {n} queued, 2 processes", rate, "drain_2_per_s", "≥ 2,400/s"),
        row("  (same, from the first task's start)", rate, "drain_2_steady_per_s"),
        row(
            f"enqueue one by one ({sizes.enqueue:,}, autocommit)",
            rate,
            "enqueue_single_per_s",
            "≥ 2,000/s, ≥ 1.25x Procrastinate",
        ),
        row(
            f"  the same, Owner tasks (anchors: no owners, {NO_OWNERS})",
            rate,
            "enqueue_single_owner_per_s",
            "≥ 1.25x Procrastinate",
        ),
        row(
            f"enqueue one by one ({sizes.enqueue:,}) in one transaction.atomic()",
            rate,
            "enqueue_atomic_per_s",
            "≥ autocommit, ≥ 1.25x Procrastinate",
        ),
        row("  the same, Owner tasks", rate, "enqueue_atomic_owner_per_s"),
        row(
            f"bulk enqueue ({sizes.bulk:,} in batches of {sizes.bulk_batch:,})",
            rate,
            "enqueue_bulk_per_s",
            "≥ 25,000/s, ≥ 2x batch_defer, ≥ 75% of COPY",
        ),
        row("  raw COPY of the same rows (the floor)", rate, "copy_raw_per_s"),
        row(
            "enqueue → start, idle worker, p50 / p95 / p99 (ms)",
            lat,
            "latency",
            "≤ 3 / - / ≤ 6 ms",
        ),
        row("  the same round trips, bare psycopg (the floor)", lat, "latency_floor"),
        row(
            "worker CPU per task, 1 process (ms)", cpu, "drain_1_worker_cpu_ms_per_task", "≤ 0.5 ms"
        ),
        row("worker CPU per task, 2 processes (ms)", cpu, "drain_2_worker_cpu_ms_per_task"),
        row("whole machine's CPU per task, 1 process (ms)", cpu, "drain_1_machine_cpu_ms_per_task"),
        row(
            "worker start + stop, idle (CPU s / wall s)",
            lambda s, k: f"{s['idle_worker_cpu_s']:.2f} / {s['idle_worker_wall_s']:.2f}",
            "",
        ),
    ]
    # Figures this run did not measure (--only) are left out.
    rows = [r for r in rows if any(c not in ("-", "- / - / -", "nan / nan") for c in r[1:-1])]
    return headers, rows


NO_OWNERS = "see the line above"


#: One side of a round-by-round ratio: (target key, figure).
Side = tuple[str, str]


def round_ratios(raw: dict[str, Any] | None, ours: Side, theirs: Side) -> list[float]:
    """``ours`` over ``theirs``, round by round (rates).

    Within a round the systems run one after another, so a pair shares the
    machine's state of that moment; the ratio of two medians mixes rounds.
    """
    if not raw:
        return []
    mine = raw.get(ours[0], {}).get(ours[1], [])
    other = raw.get(theirs[0], {}).get(theirs[1], [])
    return [
        a["per_second"] / b["per_second"]
        for a, b in zip(mine, other, strict=False)
        if not a.get("unsupported") and not b.get("unsupported") and b.get("per_second")
    ]


def by_round(ratios: list[float], goal: float, digits: int = 2) -> str:
    """`` (round by round: 4.4x, 5.5x, 3.2x; met in 1 of 3)``, or nothing for one round."""
    if len(ratios) < 2:
        return ""
    shown = ", ".join(f"{r:.{digits}f}x" for r in ratios)
    met = sum(r >= goal for r in ratios)
    return f" (round by round: {shown}; met in {met} of {len(ratios)})"


def enqueue_verdicts(summary: dict[str, Any], raw: dict[str, Any] | None = None) -> list[str]:
    """The enqueue targets: ours against Procrastinate's and a raw COPY, in the same run."""
    ours, proc = summary.get("workers-pg"), summary.get("procrastinate")
    if ours is None:
        return []
    lines = []

    def check(
        name: str,
        value: float | None,
        floor: float | None,
        ratio: float,
        what: str,
        rounds: tuple[Side, Side] | None = None,
    ) -> None:
        if value is None or floor is None or floor != floor:
            return
        got = value / floor
        verdict = "met" if got >= ratio else "NOT met"
        spread = by_round(round_ratios(raw, *rounds), ratio) if rounds else ""
        lines.append(
            f"- {name}: {fmt_rate(value)} = {got:.2f}x {what} {fmt_rate(floor)} "
            f"(target ≥ {ratio:g}x): {verdict}{spread}"
        )

    pg, anchor = "workers-pg", "procrastinate"
    for kind, suffix in (("System()", ""), ("Owner", "_owner")):
        single = ours[f"enqueue_single{suffix}_per_s"]
        atomic = ours[f"enqueue_atomic{suffix}_per_s"]
        mine_single, mine_atomic = (pg, f"enqueue_single{suffix}"), (pg, f"enqueue_atomic{suffix}")
        check(
            f"atomic vs autocommit, {kind}",
            atomic,
            single,
            1.0,
            "our autocommit",
            (mine_atomic, mine_single),
        )
        if proc:
            check(
                f"one by one, {kind}",
                single,
                proc["enqueue_single_per_s"],
                1.25,
                "Procrastinate",
                (mine_single, (anchor, "enqueue_single")),
            )
            check(
                f"in one atomic(), {kind}",
                atomic,
                proc["enqueue_atomic_per_s"],
                1.25,
                "Procrastinate",
                (mine_atomic, (anchor, "enqueue_atomic")),
            )
    bulk = ours["enqueue_bulk_per_s"]
    if proc:
        check(
            "bulk",
            bulk,
            proc["enqueue_bulk_per_s"],
            2.0,
            "Procrastinate's batch_defer",
            ((pg, "enqueue_bulk"), (anchor, "enqueue_bulk")),
        )
    check(
        "bulk",
        bulk,
        ours["copy_raw_per_s"],
        0.75,
        "a raw COPY's",
        ((pg, "enqueue_bulk"), (pg, "copy_raw")),
    )
    lite = summary.get("workers-sqlite")
    if lite and proc:
        for kind, suffix in (("System()", ""), ("Owner", "_owner")):
            check(
                f"SQLite one by one, {kind}",
                lite[f"enqueue_single{suffix}_per_s"],
                proc["enqueue_single_per_s"],
                1.0,
                "Procrastinate (PostgreSQL)",
                (("workers-sqlite", f"enqueue_single{suffix}"), (anchor, "enqueue_single")),
            )
    return lines


def verdicts(summary: dict[str, Any], raw: dict[str, Any] | None = None) -> list[str]:
    """The performance targets, checked against ours on PostgreSQL (and the anchors, if run).

    ``raw`` (every run's answers) adds each ratio's round-by-round values.
    """
    ours = summary.get("workers-pg")
    if ours is None:
        return []
    lines = []
    for key, (goal, ok) in PERFORMANCE_TARGETS.items():
        measured = ours["latency_p50_ms" if ok is None else key]
        if measured is None or measured != measured:
            continue  # not measured in this run (--only)
        if ok is None:
            passed = ours["latency_p50_ms"] <= 3 and ours["latency_p99_ms"] <= 6
            value = f"{fmt_ms(ours['latency_p50_ms'])} / {fmt_ms(ours['latency_p99_ms'])} ms"
        else:
            passed = ok(ours[key])
            value = fmt_ms(ours[key]) + " ms" if "cpu" in key else fmt_rate(ours[key])
        lines.append(f"- {key}: {value} vs {goal}: {'met' if passed else 'NOT met'}")
    dtdb, proc = summary.get("dtdb"), summary.get("procrastinate")
    drained = ours["drain_1_per_s"] == ours["drain_1_per_s"]
    for anchor_key, name, anchor, times in (
        ("dtdb", "django-tasks-db's db_worker", dtdb, 8.0),
        ("procrastinate", "Procrastinate", proc, 5.0),
    ):
        if not anchor or not drained:
            continue
        for procs in (1, 2):
            figure = f"drain_{procs}"
            ratio = ours[f"{figure}_per_s"] / anchor[f"{figure}_per_s"]
            if procs == 1:
                target = f"target ≥ {times:g}x"
                verdict = ": met" if ratio >= times else ": NOT met"
                spread = by_round(
                    round_ratios(raw, ("workers-pg", figure), (anchor_key, figure)), times, digits=1
                )
            else:
                target, verdict, spread = "no target", "", ""
            lines.append(
                f"- drain, {procs} process(es): {ratio:.1f}x {name} ({target}){verdict}{spread}"
            )
    if proc and ours["latency_p50_ms"] == ours["latency_p50_ms"]:
        ours_p50, theirs = ours["latency_p50_ms"], proc["latency_p50_ms"]
        lines.append(
            f"- enqueue → start p50: {fmt_ms(ours_p50)} ms vs Procrastinate's {fmt_ms(theirs)} ms "
            f"(target: beat it): {'met' if ours_p50 < theirs else 'NOT met'}"
        )
    floor = ours.get("latency_floor_p50_ms", float("nan"))
    if floor == floor and ours["latency_p50_ms"] == ours["latency_p50_ms"]:
        over = ours["latency_p50_ms"] - floor
        lines.append(
            f"- enqueue → start p50: {fmt_ms(ours['latency_p50_ms'])} ms, {over:.2f} ms over "
            f"the floor's {fmt_ms(floor)} ms (the same round trips without Django or the "
            f"worker; no target){' (the floor itself is over 3 ms)' if floor > 3 else ''}"
        )
    return lines + enqueue_verdicts(summary, raw)


def report(
    targets: list[Target],
    data: dict[str, Any],
    summary: dict[str, Any],
    sizes: Sizes,
    machine: dict[str, Any],
    command: str,
) -> str:
    headers, rows = table_rows(targets, summary, sizes)
    setup = data["setup"]
    lines = [
        f"# django-workers benchmark, {machine['date']}",
        "",
        f"Machine: {machine['nproc']} cores ({machine['cpu']}), {machine['memory_gib']} GiB, "
        f"Linux {machine['kernel']}, Python {machine['python']}; 1-minute load average "
        f"{machine['load_at_start']:.2f} at the start, {machine['load_at_end']:.2f} at the end.",
        "",
    ]
    for target in targets:
        info = setup[target.key]
        lines.append(f"- {target.label}: {target.describe_worker()}; {info['describe']}")
    dirty = " (django_workers/ had uncommitted changes)" if machine["library_tree_dirty"] else ""
    lines += [
        f"- django-workers at commit {machine['git_commit']}{dirty}.",
        f"- medians of {sizes.runs} run(s); latency samples per run: "
        + ", ".join(f"{t.label} {summary[t.key]['latency_samples'] // sizes.runs}" for t in targets)
        + ".",
        "",
        markdown_table(headers, rows),
        "",
    ]
    checks = verdicts(summary, data["raw"])
    if checks:
        lines += ["performance targets (django-workers on PostgreSQL):", "", *checks, ""]
    if data["sweep"]:
        lines += [
            f"django-workers on PostgreSQL, drain {sizes.drain:,} with 1 process, by "
            "--concurrency (1 run each):",
            "",
            "| --concurrency | tasks/s | first start → last finish | worker CPU s |",
            "|---:|---:|---:|---:|",
        ]
        for conc, a in data["sweep"].items():
            lines.append(
                f"| {conc} | {a['per_second']:,.0f} | {a['steady_per_second']:,.0f} | "
                f"{a['worker_cpu']:.2f} |"
            )
        lines.append("")
    if data.get("quiet"):
        quiet = data["quiet"]
        rate = median([a["per_second"] for a in quiet])
        against = [
            f"{rate / summary[key]['drain_1_per_s']:.1f}x {name}"
            for key, name in (("dtdb", "db_worker"), ("procrastinate", "Procrastinate"))
            if key in summary
        ]
        lines += [
            f"django-workers on PostgreSQL, the same 1-process drain at `--verbosity 0` (no log "
            f"line per finished task; the anchors' workers print none by default), median of "
            f"{len(quiet)}: {rate:,.0f}/s"
            + (f" ({', '.join(against)})" if against else "")
            + f", from the first start {median([a['steady_per_second'] for a in quiet]):,.0f}/s, "
            f"worker CPU {median([a['worker_cpu'] for a in quiet]):.2f} s.",
            "",
        ]
    if data.get("memory"):
        from benchmarks import memory

        lines += memory.report_lines(targets, data["memory"])
    lines += [f"Command: `{command}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument(
        "--anchors",
        action="store_true",
        help="also measure django-tasks-db and Procrastinate (PostgreSQL only)",
    )
    parser.add_argument("--quick", action="store_true", help="1 run each, fewer tasks")
    parser.add_argument(
        "--only",
        choices=("all", *ONLY_FIGURES),
        default="all",
        help="enqueue: the enqueue figures; latency: the wake-up figures; drain: the drains",
    )
    parser.add_argument(
        "--runs",
        type=int,
        help="runs of each figure (default 3, 1 with --quick); on a busy "
        "machine more runs steady the medians",
    )
    parser.add_argument(
        "--pg-db-prefix",
        default=os.environ.get("BENCH_PG_DB_PREFIX", DEFAULT_DB_PREFIX),
        help="name of our database (the anchors': NAME_anchors); must start with 'bench'",
    )
    parser.add_argument(
        "--memory", action="store_true", help="also worker memory (benchmarks/memory.py)"
    )
    args = parser.parse_args(argv)
    if (
        not args.pg_db_prefix.startswith(DEFAULT_DB_PREFIX)
        or not args.pg_db_prefix.replace("_", "").isalnum()
    ):
        parser.error("--pg-db-prefix must start with 'bench' and be letters, digits and '_'")
    sizes = QUICK if args.quick else FULL
    if args.runs is not None:
        if args.runs < 1:
            parser.error("--runs must be at least 1")
        sizes = replace(sizes, runs=args.runs)
    dbs = (
        ["sqlite", "postgresql"]
        if args.db == "all"
        else [args.db.replace("postgres", "postgresql")]
    )
    if args.anchors and "postgresql" not in dbs:
        parser.error("--anchors runs on PostgreSQL; use --db postgres or --db all")
    command = " ".join(["benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])])
    started = time.monotonic()
    try:
        shutil.rmtree(LOGS, ignore_errors=True)
        targets = build_targets(
            dbs, args.anchors, os.environ.get("BENCH_PG_URL", DEFAULT_PG), args.pg_db_prefix
        )
        compile_sources(targets)
        machine = machine_info()
        if machine["load_at_start"] > machine["nproc"] / 2:
            say(
                f"warning: the load average is {machine['load_at_start']:.1f} on "
                f"{machine['nproc']} cores: other processes are busy, so the figures will be "
                "low and noisy"
            )
        say(
            f"{len(targets)} target(s), {sizes.runs} run(s) each: "
            + ", ".join(t.label for t in targets)
        )
        data = run_all(targets, sizes, only=args.only)
        if args.memory:
            from benchmarks import memory

            data["memory"] = memory.measure_all(targets, *memory.task_counts(args.quick))
    except BenchError as e:
        say(f"error: {e}")
        return 1
    machine["load_at_end"] = os.getloadavg()[0]
    summary = summarize(targets, data, sizes)
    text = report(targets, data, summary, sizes, machine, command)
    headers, rows = table_rows(targets, summary, sizes)
    print()
    print(text_table(headers, rows))
    print()
    for line in verdicts(summary, data["raw"]):
        print(line)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": machine,
        "sizes": sizes.__dict__,
        "command": command,
        "concurrency": {
            "django-workers": OUR_CONCURRENCY,
            "procrastinate": PROCRASTINATE_CONCURRENCY,
        },
        "targets": {
            t.key: {"label": t.label, "db": t.db, "worker": t.describe_worker()} for t in targets
        },
        "summary": summary,
        **data,
        "orchestrator_cpu_s": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
        "elapsed_s": time.monotonic() - started,
    }
    for name in (f"{stamp}", "latest"):
        (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
        (RESULTS / f"{name}.md").write_text(text)
    say(
        f"done in {time.monotonic() - started:.0f} s; results in "
        f"{(RESULTS / f'{stamp}.md').relative_to(ROOT)} and .json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
