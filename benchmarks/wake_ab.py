"""Two checkouts' PostgreSQL wake-ups side by side, on the same machine at the same moments.

    .venv/bin/python benchmarks/wake_ab.py BASELINE CANDIDATE [--samples 300]

BASELINE and CANDIDATE are checkouts of the project (``git worktree add
/tmp/base <commit>`` makes one; each may hold its own ``.venv``, else this
checkout's interpreter runs it). Each gets one idle ``runworkers --concurrency
10``, serving a queue of its own, on a fresh ``bench_ab`` database on the
benchmark's server (``BENCH_PG_URL``) migrated by both. This process then
submits probe tasks one at a time, alternating between the two queues in a
random order, each after a random 20-50 ms wait as ``run.py`` spaces its
wake-up probes, and prints each worker's p50, p90 and p99 of enqueue → start.

Separate ``run.py --only latency`` runs of two commits differ by up to half a
millisecond at the p50 on a small virtual machine, because the machine's state
moves between runs; here both workers meet the same moments, so a difference
of a tenth of a millisecond shows. Run it with the same checkout twice to see
the noise left (a few hundredths of a millisecond).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import percentile, wait_for_tag  # noqa: E402
from benchmarks.harness import DEFAULT_PG, WORK, fresh_pg_database, pg_url  # noqa: E402

DATABASE = "bench_ab"
GAP = (0.02, 0.05)


def python_of(checkout: Path) -> str:
    own = checkout / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def django_command(checkout: Path, *args: str) -> list[str]:
    return [python_of(checkout), "-m", "django", *args]


def checkout_env(checkout: Path, url: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(checkout), DATABASE_URL=url)
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--samples", type=int, default=300, help="probes for each worker")
    options = parser.parse_args()
    checkouts = {"baseline": options.baseline.resolve(), "candidate": options.candidate.resolve()}

    base = os.environ.get("BENCH_PG_URL", DEFAULT_PG)
    fresh_pg_database(base, DATABASE)
    url = pg_url(base, DATABASE)
    for checkout in checkouts.values():
        subprocess.run(
            django_command(checkout, "migrate", "--verbosity", "0"),
            cwd=checkout,
            env=checkout_env(checkout, url),
            check=True,
        )
    os.environ.update(checkout_env(ROOT, url))
    import django

    django.setup()
    from django_workers import System, submit_task

    WORK.mkdir(parents=True, exist_ok=True)
    probes = WORK / "wake-ab.txt"
    probes.unlink(missing_ok=True)
    workers = [
        subprocess.Popen(
            django_command(checkout, "runworkers", "--concurrency", "10", "--queues", name),
            cwd=checkout,
            env=checkout_env(checkout, url),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, checkout in checkouts.items()
    ]
    run = uuid.uuid4().hex[:8]
    took: dict[str, list[float]] = {name: [] for name in checkouts}

    def probe(queue: str, tag: str, timeout: float) -> float | None:
        submitted = time.time()
        submit_task(
            f"ab-{run}-{tag}",
            "benchmarks.tasks.probe",
            System(),
            args=[str(probes), tag],
            scope="global",
            queue=queue,
        )
        started = wait_for_tag(str(probes), tag, timeout)
        return None if started is None else (started - submitted) * 1000.0

    try:
        for name in checkouts:
            for n in range(3):  # each worker up and warm
                if probe(name, f"warmup-{name}-{n}", 120.0) is None:
                    sys.exit(f"the {name} worker did not start its warm-up probe")
        for n in range(options.samples):
            for name in random.sample(list(checkouts), len(checkouts)):
                time.sleep(random.uniform(*GAP))
                latency = probe(name, f"{name}-{n}", 15.0)
                if latency is not None:
                    took[name].append(latency)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)
    for name, checkout in checkouts.items():
        p50, p90, p99 = (percentile(took[name], pct) for pct in (50, 90, 99))
        print(
            f"{name:9s} p50 {p50:.3f}  p90 {p90:.3f}  p99 {p99:.3f} ms"
            f"  (n={len(took[name])})  {checkout}"
        )


if __name__ == "__main__":
    main()
