"""Helpers shared by the orchestrator, the drivers and the task modules (stdlib only).

Nothing here imports Django: the same file is imported by the project's venv
and by the anchors' venv.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

#: The last line a driver prints starts with this, followed by its JSON answer.
ANSWER = "BENCH-ANSWER "


def record_start(path: str, tag: str) -> None:
    """Append ``tag`` and the wall-clock time now to ``path`` (one line, one atomic write).

    The latency tasks call this first thing, so the time is when the task began
    to run. O_APPEND keeps lines whole when several threads or processes write.
    """
    line = f"{tag} {time.time():.6f}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_starts(path: str) -> dict[str, float]:
    """The tags and start times ``record_start`` wrote to ``path`` so far."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    starts = {}
    for line in text.splitlines():
        tag, _, stamp = line.partition(" ")
        if stamp:
            starts[tag] = float(stamp)
    return starts


def wait_for_tag(path: str, tag: str, timeout: float, step: float = 0.0005) -> float | None:
    """Wait until ``tag`` appears in ``path``; return its start time, None on timeout.

    Polls the file's size (a stat, microseconds) and reads it only when it grew.
    """
    deadline = time.monotonic() + timeout
    size = -1
    while time.monotonic() < deadline:
        try:
            now_size = os.stat(path).st_size
        except FileNotFoundError:
            now_size = 0
        if now_size != size:
            size = now_size
            found = read_starts(path).get(tag)
            if found is not None:
                return found
        time.sleep(step)
    return None


def percentile(values: list[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) of ``values``, linear between closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def driver_main(actions: Mapping[str, Callable[..., dict[str, Any]]]) -> None:
    """``python -m <driver> ACTION '{"param": ...}'``: run one action, print its JSON answer."""
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in actions:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(actions)}}} [JSON params]")
    params = json.loads(sys.argv[2]) if len(sys.argv) == 3 else {}
    answer = actions[sys.argv[1]](**params)
    sys.stdout.write(ANSWER + json.dumps(answer) + "\n")
    sys.stdout.flush()


def timed_loop(fn: Callable[[int], object], n: int) -> dict[str, float]:
    """Call ``fn(i)`` for i in range(n); return the count, the seconds and the rate."""
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    seconds = time.perf_counter() - start
    return {"count": n, "seconds": seconds, "per_second": n / seconds}


def measure_latency(
    submit: Callable[[str, str], object],
    path: str,
    samples: int,
    gap: tuple[float, float],
    timeout: float,
    warmup: int = 3,
) -> dict[str, Any]:
    """Enqueue -> start latency on an idle worker, one probe task at a time.

    ``submit(path, tag)`` enqueues a probe task. The first ``warmup`` probes
    wait for the worker to come up and are not counted. Each sample then
    waits a random time from ``gap`` (min, max seconds: the worker has gone
    idle again, and a polling worker is met at a random phase of its poll),
    takes ``time.time()`` just before the submit, and waits for the probe to
    record its start; the latency is the difference.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    for n in range(warmup):
        tag = f"warmup-{n}"
        submit(path, tag)
        if wait_for_tag(path, tag, 120.0 if n == 0 else timeout) is None:
            raise RuntimeError(f"the worker did not start the warm-up probe {tag} in time")
    latencies: list[float] = []
    missing = 0
    for n in range(samples):
        time.sleep(random.uniform(*gap))
        tag = f"sample-{n}"
        submitted = time.time()
        submit(path, tag)
        started = wait_for_tag(path, tag, timeout)
        if started is None:
            missing += 1
            continue
        latencies.append((started - submitted) * 1000.0)
    return {
        "samples": len(latencies),
        "missing": missing,
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies, default=float("nan")),
        "latencies_ms": [round(v, 3) for v in latencies],
    }
