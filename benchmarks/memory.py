"""Resident memory of a worker process: idle, over a long drain, and after it.

    .venv/bin/python benchmarks/memory.py [--db sqlite|postgres|all] [--anchors] [--quick]
        [--tasks 100000] [--anchor-tasks 20000] [--processes N]

Also part of ``benchmarks/run.py --memory``, whose results file then carries
the memory table beside the other figures.

For each system one long-running worker (not a burst one: the same process
throughout) is started on an empty queue: ours ``runworkers --concurrency 10``,
django-tasks-db's ``db_worker``, Procrastinate's ``worker --concurrency 10``,
exactly as run.py starts them. Each is a single process (``runworkers``
without ``--processes``) unless ``--processes N`` asks ours for N worker
processes under its supervisor; the figures are summed over the process and
its children (``processes`` in the JSON says how many there were).

1. **Idle**: ``VmRSS`` from ``/proc/<pid>/status`` once it has settled (no
   change of more than 1% over 2 seconds, at least 5 seconds after the start).
2. **Drain**: ``--tasks`` no-op tasks (``--anchor-tasks`` for the anchors,
   which drain 4-7x slower) are queued in bulk, in batches of 1,000, while
   the worker runs; ``VmRSS`` and the count of completed tasks are sampled
   every half second until all have completed.
3. **After**: ``VmRSS`` 2 seconds after the last task completed, and the peak
   (``VmHWM``, the kernel's high-water mark of the process's RSS).
4. **Growth**: the least-squares slope of RSS against tasks done over the
   second half of the drain, per 10,000 tasks. Start-up allocations and the
   first batches' caches are in the first half; a leak keeps growing in the
   second.

Databases: run.py's (``BENCH_PG_DB_PREFIX`` renames them), dropped and created
afresh by a run of this script alone.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import (  # noqa: E402
    DEFAULT_DB_PREFIX,
    DEFAULT_PG,
    LOGS,
    RESULTS,
    BenchError,
    Target,
    build_targets,
    drive,
    machine_info,
    markdown_table,
    say,
    spawn,
    stop,
    text_table,
)

#: Tasks drained by ours and by each anchor, full run and --quick.
OUR_TASKS, ANCHOR_TASKS = 100_000, 20_000
QUICK_OUR_TASKS, QUICK_ANCHOR_TASKS = 10_000, 2_000
#: Seconds between two samples during the drain.
SAMPLE_EVERY = 0.5
#: An idle worker has settled when its RSS moved less than this over SETTLE_WINDOW seconds.
SETTLE_TOLERANCE, SETTLE_WINDOW, SETTLE_MIN, SETTLE_MAX = 0.01, 2.0, 5.0, 30.0

#: How many tasks of a system have completed, as SQL on its own tables.
COMPLETED_SQL = {
    "workers": "SELECT COUNT(*) FROM django_workers_taskrecord WHERE status = 'COMPLETED'",
    "dtdb": "SELECT COUNT(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'",
    "procrastinate": "SELECT COUNT(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
}


# -- reading /proc ----------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc/<pid>/task/*/children)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(child) for child in f.read().split())
    return pids


def status_kib(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM and RssAnon of one process, in KiB (empty if it is gone)."""
    fields: dict[str, int] = {}
    with (
        contextlib.suppress(FileNotFoundError, ProcessLookupError),
        open(f"/proc/{pid}/status") as f,
    ):
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon"):
                fields[name] = int(value.split()[0])
    return fields


def tree_kib(pid: int) -> dict[str, int]:
    """The tree's summed VmRSS, VmHWM and RssAnon in KiB, and how many processes it has."""
    pids = process_tree(pid)
    total = {"VmRSS": 0, "VmHWM": 0, "RssAnon": 0}
    for one in pids:
        for name, value in status_kib(one).items():
            total[name] += value
    return {**total, "processes": len(pids)}


# -- counting completed tasks -----------------------------------------------------------


def completed_counter(target: Target) -> tuple[Callable[[], int], Callable[[], None]]:
    """A function that counts the target's completed tasks, and one that closes it."""
    system = "workers" if target.key.startswith("workers") else target.key
    sql = COMPLETED_SQL[system]
    if target.db == "sqlite":
        path = urlsplit(target.db_url).path
        lite = sqlite3.connect(path, timeout=20, isolation_level=None)
        return (lambda: lite.execute(sql).fetchone()[0]), lite.close
    import psycopg

    conn = psycopg.connect(target.db_url, autocommit=True)

    def count() -> int:
        row = conn.execute(sql).fetchone()
        return int(row[0]) if row else 0

    return count, conn.close


# -- one measurement --------------------------------------------------------------------


def wait_settled(proc: Any, target: Target) -> dict[str, int]:
    """Wait until the idle worker's RSS stops moving; return its figures then."""
    started = time.monotonic()
    history: list[tuple[float, int]] = []
    while True:
        if proc.poll() is not None:
            raise BenchError(f"{target.label}: the worker exited with {proc.returncode} at start")
        now = time.monotonic()
        sample = tree_kib(proc.pid)
        history.append((now, sample["VmRSS"]))
        window = [rss for t, rss in history if t >= now - SETTLE_WINDOW]
        steady = max(window) - min(window) <= SETTLE_TOLERANCE * max(window)
        if steady and now - started >= SETTLE_MIN and history[0][0] <= now - SETTLE_WINDOW:
            return sample
        if now - started >= SETTLE_MAX:
            say(f"note: {target.label} idle RSS still moving after {SETTLE_MAX:.0f} s")
            return sample
        time.sleep(0.25)


def growth_per_10k(samples: list[list[float]], count: int) -> float:
    """KiB of RSS per 10,000 tasks: the least-squares slope over the drain's second half."""
    half = [(done, rss) for _t, done, rss in samples if count / 2 <= done <= count]
    if len(half) < 2:
        return float("nan")
    mean_x = sum(x for x, _ in half) / len(half)
    mean_y = sum(y for _, y in half) / len(half)
    var = sum((x - mean_x) ** 2 for x, _ in half)
    if var == 0:
        return float("nan")
    cov = sum((x - mean_x) * (y - mean_y) for x, y in half)
    return cov / var * 10_000


def measure_memory(target: Target, count: int, processes: int = 1) -> dict[str, Any]:
    """Idle RSS, then RSS over a drain of ``count`` queued no-op tasks by the same process.

    ``processes``: ours runs as ``runworkers --processes N`` (the anchors as always).
    """
    if not target.key.startswith("workers"):
        processes = 1  # the anchors' workers have no such option
    drive(target, "reset")
    log = LOGS / f"{target.key}-memory.log"
    command = target.worker_command(burst=False)
    if processes > 1:
        command += ["--processes", str(processes)]
    proc = spawn(target, command, log)
    count_done, close = completed_counter(target)
    try:
        idle = wait_settled(proc, target)
        started = time.monotonic()
        drive(target, "prefill", count=count, fresh=False)
        samples: list[list[float]] = []
        deadline = started + max(900.0, count / 20)
        done = 0
        while done < count:
            if proc.poll() is not None:
                raise BenchError(f"{target.label}: the worker exited during the drain; see {log}")
            if time.monotonic() > deadline:
                raise BenchError(f"{target.label}: {done} of {count} done in time; see {log}")
            done = count_done()
            samples.append(
                [round(time.monotonic() - started, 2), done, tree_kib(proc.pid)["VmRSS"]]
            )
            time.sleep(SAMPLE_EVERY)
        drained = time.monotonic() - started
        time.sleep(2.0)
        after = tree_kib(proc.pid)
    finally:
        close()
        code, _cpu = stop(proc)
    if code not in (0, -15, 1):
        say(f"note: {target.label} worker exited with {code} after SIGTERM (see {log})")
    return {
        "tasks": count,
        "processes": after["processes"],
        "processes_option": processes,
        "idle_kib": idle["VmRSS"],
        "idle_anon_kib": idle["RssAnon"],
        "after_kib": after["VmRSS"],
        "after_anon_kib": after["RssAnon"],
        "peak_kib": after["VmHWM"],
        "growth_kib_per_10k": growth_per_10k(samples, count),
        "drain_seconds": drained,
        "samples": samples,
    }


def task_counts(quick: bool) -> tuple[int, int]:
    """How many tasks ours and each anchor drain."""
    return (QUICK_OUR_TASKS, QUICK_ANCHOR_TASKS) if quick else (OUR_TASKS, ANCHOR_TASKS)


def measure_all(
    targets: list[Target], our_tasks: int, anchor_tasks: int, processes: int = 1
) -> dict[str, Any]:
    """The memory figures of every target, one run each."""
    results = {}
    for target in targets:
        drive(target, "migrate")
        count = our_tasks if target.key.startswith("workers") else anchor_tasks
        began = time.monotonic()
        results[target.key] = answer = measure_memory(target, count, processes)
        say(
            f"{'memory':<15} {target.label:<40} {brief(answer)}  ({time.monotonic() - began:.0f} s)"
        )
    return results


# -- reporting --------------------------------------------------------------------------


def mib(kib: float) -> str:
    return "-" if kib != kib else f"{kib / 1024:.1f}"


def brief(answer: dict[str, Any]) -> str:
    return (
        f"idle {mib(answer['idle_kib'])} MiB, after {answer['tasks']:,} tasks "
        f"{mib(answer['after_kib'])} MiB, peak {mib(answer['peak_kib'])} MiB, "
        f"{answer['growth_kib_per_10k']:+.0f} KiB per 10k in the second half"
    )


def table(targets: list[Target], results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = [
        "worker (RSS summed over its processes)",
        "tasks drained",
        "idle RSS (MiB)",
        "RSS after the drain (MiB)",
        "peak RSS (MiB)",
        "growth per 10,000 tasks, second half (KiB)",
    ]
    rows = []
    for target in targets:
        if target.key not in results:
            continue
        a = results[target.key]
        option = a.get("processes_option", 1)
        more = f" --processes {option} ({a['processes']} processes)" if option > 1 else ""
        rows.append(
            [
                f"{target.label}: {target.describe_worker()}{more}",
                f"{a['tasks']:,}",
                mib(a["idle_kib"]),
                mib(a["after_kib"]),
                mib(a["peak_kib"]),
                f"{a['growth_kib_per_10k']:+.0f}",
            ]
        )
    return headers, rows


def report_lines(targets: list[Target], results: dict[str, Any]) -> list[str]:
    """The markdown section run.py and this script write to their results file."""
    headers, rows = table(targets, results)
    return [
        "Memory (resident set of the worker, VmRSS, summed over its processes; one "
        "long-running worker each, "
        "idle then draining the tasks queued while it runs):",
        "",
        markdown_table(headers, rows),
        "",
        "Growth is the slope of RSS against tasks done over the second half of the drain. "
        "Over a short drain (--quick) it mostly shows caches still filling, not a leak.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument("--anchors", action="store_true", help="also the anchors (PostgreSQL)")
    parser.add_argument("--quick", action="store_true", help="fewer tasks")
    parser.add_argument("--tasks", type=int, default=None, help="tasks ours drains")
    parser.add_argument("--anchor-tasks", type=int, default=None, help="tasks an anchor drains")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="run ours as runworkers --processes N (a supervisor and N workers)",
    )
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error("--processes takes a number of processes, 1 or more")
    dbs = (
        ["sqlite", "postgresql"]
        if args.db == "all"
        else [args.db.replace("postgres", "postgresql")]
    )
    if args.anchors and "postgresql" not in dbs:
        parser.error("--anchors runs on PostgreSQL; use --db postgres or --db all")
    default_ours, default_theirs = task_counts(args.quick)
    ours, theirs = args.tasks or default_ours, args.anchor_tasks or default_theirs
    command = " ".join(["benchmarks/memory.py", *(argv if argv is not None else sys.argv[1:])])
    try:
        targets = build_targets(
            dbs,
            args.anchors,
            os.environ.get("BENCH_PG_URL", DEFAULT_PG),
            os.environ.get("BENCH_PG_DB_PREFIX", DEFAULT_DB_PREFIX),
        )
        machine = machine_info()
        results = measure_all(targets, ours, theirs, args.processes)
    except BenchError as e:
        say(f"error: {e}")
        return 1
    headers, rows = table(targets, results)
    print()
    print(text_table(headers, rows))
    text = "\n".join(
        [
            f"# django-workers worker memory, {machine['date']}",
            "",
            f"Machine: {machine['nproc']} cores, {machine['memory_gib']} GiB, Python "
            f"{machine['python']}; django-workers at commit {machine['git_commit']}; "
            f"load average {machine['load_at_start']:.2f} at the start.",
            "",
            *report_lines(targets, results),
            f"Command: `{command}`",
            "",
        ]
    )
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine, "command": command, "memory": results}
    for name in (f"memory-{stamp}", "memory-latest"):
        (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
        (RESULTS / f"{name}.md").write_text(text)
    say(f"results in {(RESULTS / f'memory-{stamp}.md').relative_to(ROOT)} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
