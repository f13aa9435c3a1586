"""Workflows: promotion latency across worker processes, and the cost of being a workflow.

    .venv/bin/python benchmarks/workflow_bench.py --db postgres   # or sqlite, or all

Two figures, each on a fresh database (PostgreSQL ``bench_workflow`` next to
``BENCH_PG_URL``, default ``postgres://postgres@127.0.0.1:5432``; SQLite a
file in a temporary directory):

- **Promotion latency.** Two ``runworkers`` processes: one serves queue
  ``a``, the other queue ``b``. Each workflow is ``first`` (queue ``a``)
  then ``second`` (queue ``b``). ``first`` returns ``time.time()`` just
  before it returns; ``second`` returns ``time.time()`` as it starts. The
  difference spans ``first``'s end write and commit (with the promotion in
  the same transaction), the wake-up of the other process (NOTIFY on
  PostgreSQL, its poll elsewhere), its claim, and the start of the function.
  Workflows run one after another, so each dependent meets an idle worker.
- **Overhead.** 200 workflows of 10 nodes (a root, 8 nodes after it, a join
  after those) against the same 2,000 no-op tasks submitted plainly, each
  set drained by one ``runworkers --burst --concurrency 8`` started after
  everything was submitted. Each figure is from the first run's start to the
  last run's end (the records' ``started_at`` and ``finished_at``), and the
  ratio is workflow time over plain time; each is the median of ``--runs``
  drains (5), the two sets taking turns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: This module as the workers import it (never ``__main__``).
MODULE = "benchmarks.workflow_bench"
PG_BASE = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")


# -- the tasks (imported by path in the worker processes) --------------------------------------


def stamp() -> float:
    """Return the wall clock: the end of ``first``, or the start of ``second``."""
    return time.time()


def noop() -> None:
    """Do nothing: the overhead figure measures the queue and the workflow, not work."""


# -- set-up -------------------------------------------------------------------------------------


def database_url(db: str, workdir: Path) -> str:
    if db == "sqlite":
        return f"sqlite:///{workdir / 'bench_workflow.sqlite3'}"
    from benchmarks.wait_latency import bench_url

    return bench_url(f"{PG_BASE}/postgres", "bench_workflow")


def configure_django(url: str) -> None:
    from benchmarks.dbconfig import configure_site

    configure_site(url, "workflow-bench")


def start_worker(url: str, *args: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, __file__, "--serve", url, *args]
    return subprocess.Popen(command, cwd=ROOT)


def serve(url: str, args: list[str]) -> None:
    configure_django(url)
    from django.core.management import call_command

    call_command("runworkers", *args, verbosity=0)


def clear() -> None:
    from django.db import connection

    from django_workers.models import TaskRecord, WorkerProcess, WorkflowRecord

    WorkflowRecord.objects.all().delete()
    TaskRecord.objects.all().delete()
    WorkerProcess.objects.all().delete()
    if connection.vendor == "postgresql":
        # Every drain starts on tables without the dead rows of the one before.
        with connection.cursor() as cursor:
            for model in (WorkflowRecord, TaskRecord):
                cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")


def wait_registered(count: int, timeout: float = 30.0) -> None:
    from django_workers.models import WorkerProcess

    deadline = time.monotonic() + timeout
    while WorkerProcess.objects.count() < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{count} workers did not start")
        time.sleep(0.05)


# -- the figures --------------------------------------------------------------------------------


def promotion_latency(url: str, workflows: int, warmup: int) -> dict[str, Any]:
    from django_workers import System, Workflow

    clear()
    workers = [start_worker(url, "--queues", q, "--concurrency", "2") for q in ("a", "b")]
    try:
        wait_registered(2)
        gaps = []
        for n in range(warmup + workflows):
            wf = Workflow(f"latency-{n}", System())
            first = wf.add("first", f"{MODULE}.stamp", queue="a")
            wf.add("second", f"{MODULE}.stamp", queue="b").after(first)
            info = wf.submit().wait(timeout=30)
            if info.state != "completed":
                raise SystemExit(f"workflow {info.id} ended {info.state}")
            if n >= warmup:
                gaps.append(_result(info, "second") - _result(info, "first"))
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)
    return summary(gaps)


def _result(info: Any, node: str) -> float:
    from django_workers.models import TaskRecord

    result = TaskRecord.objects.get(pk=info.node(node).task_id).result
    assert result is not None, f"node {node} returned nothing"
    return float(result)


def overhead(url: str, workflows: int, width: int, runs: int) -> dict[str, Any]:
    """Median of ``runs`` drains of each set, the two sets taking turns."""
    nodes = workflows * (width + 2)
    as_workflows, plain = [], []
    for _ in range(runs):
        submit_workflows(workflows, width)
        as_workflows.append(drain(url))
        submit_plain(nodes)
        plain.append(drain(url))
    workflow_seconds, plain_seconds = statistics.median(as_workflows), statistics.median(plain)
    return {
        "tasks": nodes,
        "runs": runs,
        "workflow_seconds": round(workflow_seconds, 3),
        "plain_seconds": round(plain_seconds, 3),
        "workflow_rate": round(nodes / workflow_seconds),
        "plain_rate": round(nodes / plain_seconds),
        "ratio": round(workflow_seconds / plain_seconds, 3),
        "all_workflow_seconds": [round(x, 3) for x in as_workflows],
        "all_plain_seconds": [round(x, 3) for x in plain],
    }


def submit_workflows(workflows: int, width: int) -> None:
    from django_workers import System, Workflow

    clear()
    for n in range(workflows):
        wf = Workflow(f"shape-{n}", System())
        root = wf.add("root", f"{MODULE}.noop")
        middle = [wf.add(f"m{i}", f"{MODULE}.noop").after(root) for i in range(width)]
        wf.add("join", f"{MODULE}.noop").after(*middle)
        wf.submit()


def submit_plain(nodes: int) -> None:
    from django_workers import System, TaskSubmission, submit_tasks

    clear()
    batch = [
        TaskSubmission(key=f"plain-{n}", task=f"{MODULE}.noop", scope="global")
        for n in range(nodes)
    ]
    for start in range(0, nodes, 500):
        submit_tasks(batch[start : start + 500], System())


def drain(url: str) -> float:
    from django.db.models import Max, Min

    from django_workers.models import TaskRecord

    worker = start_worker(url, "--burst", "--concurrency", "8")
    if worker.wait(600) != 0:
        raise SystemExit(f"runworkers --burst exited with {worker.returncode}")
    left = TaskRecord.objects.exclude(status="COMPLETED").count()
    if left:
        raise SystemExit(f"{left} tasks did not complete")
    span = TaskRecord.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
    return (span["last"] - span["first"]).total_seconds()


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    cuts = statistics.quantiles(ms, n=100, method="inclusive")
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(cuts[98], 2),
        "max_ms": round(ms[-1], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument("--workflows", type=int, default=200, help="measured latency samples")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--shapes", type=int, default=200, help="10-node workflows to drain")
    parser.add_argument("--runs", type=int, default=5, help="drains of each set (the median)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--serve", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:  # a worker subprocess
        serve(args.serve[0], args.serve[1:])
        return 0
    dbs = ["sqlite", "postgres"] if args.db == "all" else [args.db]
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for db in dbs:
            # One interpreter per database: Django is configured once per process.
            command = [sys.executable, __file__, "--one", db, workdir, *_pass_on(args)]
            out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
            figures[db] = json.loads(out.stdout.strip().splitlines()[-1])
            report(db, figures[db])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def _pass_on(args: argparse.Namespace) -> list[str]:
    return [str(args.workflows), str(args.warmup), str(args.shapes), str(args.runs)]


def one(db: str, workdir: str, workflows: int, warmup: int, shapes: int, runs: int) -> None:
    url = database_url(db, Path(workdir))
    configure_django(url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    result = {
        "promotion": promotion_latency(url, workflows, warmup),
        "overhead": overhead(url, shapes, width=8, runs=runs),
    }
    print(json.dumps(result))


def report(db: str, figures: dict[str, Any]) -> None:
    p, o = figures["promotion"], figures["overhead"]
    print(
        f"{db:<9} promotion (dependency's end -> dependent starts, another process): "
        f"p50 {p['p50_ms']:.1f} ms, p99 {p['p99_ms']:.1f} ms, max {p['max_ms']:.1f} ms (n={p['n']})"
    )
    print(
        f"{db:<9} {o['tasks']} tasks as 10-node workflows: {o['workflow_seconds']:.2f} s "
        f"({o['workflow_rate']}/s); plainly: {o['plain_seconds']:.2f} s ({o['plain_rate']}/s); "
        f"ratio {o['ratio']:.2f}x"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        one(sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:8]))
    else:
        sys.exit(main())
