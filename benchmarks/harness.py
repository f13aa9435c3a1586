"""What every benchmark script shares: the systems it measures, their drivers and workers.

A ``Target`` is one system on one database; ``build_targets`` makes them (each
PostgreSQL database dropped and created afresh), ``drive`` runs one driver
action in a target's interpreter, ``spawn``/``stop``/``reap`` start and stop
its workers with their CPU figures. ``run.py``, ``memory.py`` and
``profile_worker.py`` build on it; nothing here imports them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import ANSWER  # noqa: E402

BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
WORK = RESULTS / "work"
LOGS = RESULTS / "logs"
ANCHORS_VENV = BENCH / ".venv-anchors"
ANCHORS_REQUIREMENTS = BENCH / "anchors" / "requirements.txt"
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432"
DEFAULT_DB_PREFIX = "bench"
#: Threads per runworkers process. Procrastinate runs 10 jobs at once per
#: worker in the performance targets, so ours gets the same number of in-flight tasks.
OUR_CONCURRENCY = 10
PROCRASTINATE_CONCURRENCY = 10


@dataclass
class Target:
    """One system on one database: how to drive it and how to start its workers."""

    key: str
    label: str
    db: str  # "sqlite" or "postgresql"
    python: str
    settings: str
    driver: str
    db_url: str
    #: Extra parameters every driver action of this target takes.
    params: dict[str, Any] = field(default_factory=dict)
    #: Seconds between two polls when idle (None: woken by LISTEN/NOTIFY).
    poll: float | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DJANGO_SETTINGS_MODULE"] = self.settings
        env["DATABASE_URL"] = self.db_url
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        env.pop("PYTHONHOME", None)
        return env

    def worker_command(self, burst: bool, concurrency: int | None = None) -> list[str]:
        django = [self.python, "-m", "django"]
        if self.key.startswith("workers"):
            cmd = [*django, "runworkers", "--concurrency", str(concurrency or OUR_CONCURRENCY)]
            return [*cmd, "--burst"] if burst else cmd
        if self.key == "dtdb":
            cmd = [*django, "db_worker", "--no-startup-delay", "--no-reload"]
            return [*cmd, "--batch"] if burst else cmd
        cmd = [*django, "procrastinate", "worker", "--concurrency", str(PROCRASTINATE_CONCURRENCY)]
        return [*cmd, "--one-shot"] if burst else cmd

    def describe_worker(self) -> str:
        if self.key.startswith("workers"):
            return f"runworkers --concurrency {OUR_CONCURRENCY}"
        if self.key == "dtdb":
            return "db_worker (one task at a time, --interval 1)"
        return f"procrastinate worker --concurrency {PROCRASTINATE_CONCURRENCY}"


class BenchError(RuntimeError):
    """A step of the benchmark failed; the message says which and why."""


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


# -- drivers and workers --------------------------------------------------------------


def drive(target: Target, action: str, **params: Any) -> dict[str, Any]:
    """Run one driver action in the target's interpreter; return its JSON answer."""
    cmd = [target.python, "-m", target.driver, action, json.dumps({**target.params, **params})]
    done = subprocess.run(
        cmd, cwd=ROOT, env=target.env(), capture_output=True, text=True, timeout=900, check=False
    )
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(ANSWER):
            return json.loads(line[len(ANSWER) :])
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
    raise BenchError(f"{target.label}: driver action {action!r} failed:\n{tail}")


def spawn(target: Target, cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=target.env(), stdout=out, stderr=subprocess.STDOUT
        )


def reap(procs: list[subprocess.Popen[bytes]], timeout: float) -> tuple[list[int], float]:
    """Wait for every process; return exit codes and their user+sys CPU seconds.

    ``wait4`` reports a child's own CPU plus that of the children it reaped, so
    a process that forks workers is counted whole.
    """
    deadline = time.monotonic() + timeout
    cpu = 0.0
    codes: list[int] = []
    for proc in procs:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                for other in procs:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(other.pid, signal.SIGKILL)
                raise BenchError(f"a worker did not finish within {timeout:.0f} s: {proc.args!r}")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        codes.append(proc.returncode)
        cpu += usage.ru_utime + usage.ru_stime
    return codes, cpu


def stop(proc: subprocess.Popen[bytes], grace: float = 30.0) -> tuple[int, float]:
    """SIGTERM a long-running worker, wait for it (SIGKILL after ``grace``); code and CPU."""
    # os.kill, not proc.send_signal: that polls first and would reap the
    # process itself, losing its CPU figures to us.
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        codes, cpu = reap([proc], grace)
    except BenchError:
        codes, cpu = [-9], float("nan")
    return codes[0], cpu


def machine_busy() -> float:
    """Seconds of CPU the whole machine has spent busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


# -- the databases and the machine ---------------------------------------------------


def pg_url(base: str, database: str) -> str:
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, ""))


def fresh_pg_database(base: str, database: str) -> None:
    """Drop and create ``database`` (one of the benchmark's own) on the server at ``base``.

    Every run starts from an empty database migrated by the code under test,
    so a migration edited in place (as happens before a release) is measured
    as it is now, and no earlier run's tables or bloat carry over.
    """
    import psycopg
    from psycopg import sql

    if not database.startswith(DEFAULT_DB_PREFIX):
        raise BenchError(f"refusing to drop {database!r}: not one of the benchmark's databases")
    name = sql.Identifier(database)
    try:
        with psycopg.connect(pg_url(base, "postgres"), autocommit=True, connect_timeout=5) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
            c.execute(sql.SQL("CREATE DATABASE {}").format(name))
    except psycopg.Error as e:
        raise BenchError(
            f"PostgreSQL at {base} is not reachable ({e}); start it or set BENCH_PG_URL"
        ) from e


def ensure_anchors_venv() -> str:
    """Create benchmarks/.venv-anchors with the pinned anchors; return its python."""
    python = ANCHORS_VENV / "bin" / "python"
    django_version = version("django")
    want = (
        hashlib.sha256(ANCHORS_REQUIREMENTS.read_bytes()).hexdigest() + f" django={django_version}"
    )
    stamp = ANCHORS_VENV / ".bench-installed"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return str(python)
    base = os.environ.get("BENCH_ANCHORS_PYTHON") or str(
        getattr(sys, "_base_executable", sys.executable)
    )
    if not python.exists():
        say(f"creating {ANCHORS_VENV.relative_to(ROOT)} with {base}")
        subprocess.run([base, "-m", "venv", str(ANCHORS_VENV)], check=True)
    say("installing the anchors (django-tasks-db, procrastinate) into it ...")
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            str(ANCHORS_REQUIREMENTS),
            f"Django=={django_version}",
        ],
        check=True,
    )
    stamp.write_text(want + "\n")
    return str(python)


def compile_sources(targets: list[Target]) -> None:
    """Byte-compile the code each interpreter imports from this checkout, as pip does.

    The anchors come from installed wheels, compiled on install; django-workers
    and the benchmark's own modules run from the source tree. Where
    ``PYTHONDONTWRITEBYTECODE`` is set (or the tree is new), every worker start
    would compile them again, about 0.1 s on this project's start.
    """
    for python in sorted({t.python for t in targets}):
        subprocess.run(
            [python, "-m", "compileall", "-q", str(ROOT / "django_workers"), str(BENCH)],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def ours(key: str, database: str, db_url: str, poll: float | None = None) -> Target:
    """django-workers on one database, driven from this interpreter."""
    return Target(
        key=f"workers-{key}",
        label=f"django-workers ({database})",
        db="sqlite" if key == "sqlite" else "postgresql",
        python=sys.executable,
        settings="benchmarks.settings",
        driver="benchmarks.driver",
        db_url=db_url,
        poll=poll,
    )


def build_targets(
    dbs: list[str], anchors: bool, pg_base: str, prefix: str = DEFAULT_DB_PREFIX
) -> list[Target]:
    targets = []
    if "sqlite" in dbs:
        WORK.mkdir(parents=True, exist_ok=True)
        path = WORK / f"{prefix}-workers.sqlite3"
        for stale in WORK.glob(f"{prefix}-workers.sqlite3*"):  # the file, its WAL, its wake folder
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        targets.append(ours("sqlite", "SQLite", f"sqlite:///{path}", poll=0.2))
    if "postgresql" in dbs:
        fresh_pg_database(pg_base, prefix)
        targets.append(ours("pg", "PostgreSQL", pg_url(pg_base, prefix)))
        if anchors:
            python = ensure_anchors_venv()
            fresh_pg_database(pg_base, f"{prefix}_anchors")
            anchors_url = pg_url(pg_base, f"{prefix}_anchors")

            def anchor(system: str, label: str, poll: float | None = None) -> Target:
                return Target(
                    key=system,
                    label=label,
                    db="postgresql",
                    python=python,
                    settings="benchmarks.anchors.settings",
                    driver="benchmarks.anchors.driver",
                    db_url=anchors_url,
                    params={"system": system},
                    poll=poll,
                )

            targets.append(anchor("dtdb", "django-tasks-db db_worker (PostgreSQL)", poll=1.0))
            targets.append(anchor("procrastinate", "Procrastinate (PostgreSQL)"))
    return targets


def machine_info() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line), "?")

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_at_start": os.getloadavg()[0],
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "library_tree_dirty": bool(git("status", "--porcelain", "--", "django_workers")),
    }


# -- tables ----------------------------------------------------------------------------


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|---|" + "---:|" * (len(headers) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    out = []
    for n, r in enumerate([headers, *rows]):
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        out.append("  ".join(cells))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
