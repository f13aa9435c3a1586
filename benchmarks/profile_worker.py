"""Profile one ``runworkers --burst`` draining no-op tasks, with py-spy; print the hot spots.

    .venv/bin/pip install py-spy        # local only; not a project dependency
    .venv/bin/python benchmarks/profile_worker.py [--db postgres|sqlite] [--count 20000] [--wall]

It queues ``--count`` no-op tasks in the benchmark database (``bench`` on
PostgreSQL, a scratch SQLite file otherwise), runs one worker under
``py-spy record`` and writes the raw collapsed stacks to
``benchmarks/results/profile-<db>-<mode>.txt`` (load it in speedscope, or
feed it to flamegraph.pl). Two modes:

- CPU (default, ``py-spy --gil``): only the thread holding the GIL is
  sampled, so the samples show where the worker spends Python CPU. Printed:
  inclusive time of the django_workers functions, and self time of the leaf
  functions everywhere (Django, psycopg, logging ...).
- ``--wall`` (``py-spy --idle``): every thread, waiting or not. Printed: for
  each of the runtime's loops (claim, finisher, run threads, housekeeping,
  listener), where its wall time goes, by the function it calls directly.
  A drain bound by round trips and waits rather than CPU shows up here.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import (  # noqa: E402
    DEFAULT_PG,
    OUR_CONCURRENCY,
    RESULTS,
    BenchError,
    build_targets,
    drive,
)

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """``func (path/to/file.py:123)`` -> ``file.py:func`` (library paths shortened)."""
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "/lib/python3.12/", str(ROOT) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{match['func']}"


def summarize(raw: Path, top: int) -> str:
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [frame_name(f) for f in stack.split(";") if f]
        total += n
        for name in set(frames):
            inclusive[name] += n
        if frames:
            leaf[frames[-1]] += n
    if not total:
        return "no samples (is py-spy allowed to ptrace here?)"
    out = [f"{total} samples (GIL held)", "", "inclusive, django_workers functions:"]
    ours = [(k, v) for k, v in inclusive.most_common() if k.startswith("django_workers/")]
    out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in ours[:top]]
    out += ["", "self time, leaf functions:"]
    out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in leaf.most_common(top)]
    return "\n".join(out)


#: The runtime's thread loops, and how the wall-clock summary names them.
LOOPS = (
    ("claim loop", "Claiming._claim_loop"),
    ("finisher", "Ending._finisher_loop"),
    ("run threads", "WorkerRuntime._run_loop"),
    ("housekeeping", "Housekeeping._housekeeping_loop"),
    ("listener", "Listener._loop"),
)


def summarize_wall(raw: Path, top: int) -> str:
    """For each runtime loop: its samples, split by the function the loop calls directly."""
    per_loop: dict[str, Counter[str]] = {name: Counter() for name, _ in LOOPS}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame_name(f) for f in stack.split(";") if f]
        for name, func in LOOPS:
            at = next((i for i, f in enumerate(frames) if f.endswith(":" + func)), None)
            if at is not None:
                callee = frames[at + 1] if at + 1 < len(frames) else "(the loop itself)"
                per_loop[name][callee] += int(count)
                break
    out = []
    for name, calls in per_loop.items():
        total = sum(calls.values())
        if not total:
            continue
        out.append(f"{name}: {total} samples (all its threads)")
        out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in calls.most_common(min(top, 8))]
    return "\n".join(out) or "no samples of the runtime's loops"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=OUR_CONCURRENCY)
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--wall", action="store_true", help="sample every thread, idle too (where time goes)"
    )
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy is not installed: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    import os

    db = "postgresql" if args.db == "postgres" else "sqlite"
    try:
        target = build_targets([db], False, os.environ.get("BENCH_PG_URL", DEFAULT_PG))[0]
        drive(target, "migrate")
        drive(target, "prefill", count=args.count)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    RESULTS.mkdir(parents=True, exist_ok=True)
    mode = "wall" if args.wall else "cpu"
    raw = RESULTS / f"profile-{args.db}-{mode}.txt"
    worker = target.worker_command(burst=True, concurrency=args.concurrency)
    started = time.monotonic()
    # The worker at its default verbosity, as the benchmark runs it: a log line per task.
    with open(raw.with_suffix(".log"), "wb") as log:
        subprocess.run(
            [
                py_spy,
                "record",
                *(["--idle", "--threads"] if args.wall else ["--gil"]),
                "--format",
                "raw",
                "--rate",
                str(args.rate),
                "--output",
                str(raw),
                "--",
                *worker,
            ],
            cwd=ROOT,
            env=target.env(),
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    seconds = time.monotonic() - started
    stats = drive(target, "drain_stats")
    print(
        f"drained {stats['completed']:,} of {args.count:,} no-op tasks in {seconds:.1f} s "
        f"under py-spy (--concurrency {args.concurrency}, {args.db}); raw stacks: "
        f"{raw.relative_to(ROOT)}\n"
    )
    print(summarize_wall(raw, args.top) if args.wall else summarize(raw, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
