"""Wake-up behind PgBouncer in transaction mode, with and without LISTEN_DATABASE.

    .venv/bin/python benchmarks/pooler_wakeup.py [--samples 200] [--json out.json]

Needs Debian's ``pgbouncer`` (``apt-get install -y pgbouncer``) and PostgreSQL at
``BENCH_PG_URL`` (default postgres://postgres@127.0.0.1:5432, trust auth). It
makes a fresh ``bench_pooler`` database, starts its own pgbouncer on a free
port with a transaction pool of 4 server sessions in front of it (as the
``postgres`` user when run as root), and measures, for each way of running one
idle ``runworkers --concurrency 4``, the enqueue -> start latency of probe tasks
submitted one at a time from this process (directly, after a random 20-50 ms
gap: ``common.measure_latency``):

- ``direct``: the worker connects to PostgreSQL itself (the reference);
- ``pooled``: its ``default`` goes through the transaction pool, no
  LISTEN_DATABASE: its LISTEN hears nothing, so it polls every POLL_INTERVAL
  (0.2 s);
- ``pooled + LISTEN_DATABASE``: the same, with LISTEN on a direct alias.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import measure_latency  # noqa: E402
from benchmarks.harness import DEFAULT_PG, WORK, fresh_pg_database, pg_url  # noqa: E402

DATABASE = "bench_pooler"
GAP = (0.02, 0.05)


def start_pgbouncer(base: str, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """pgbouncer with a transaction pool ``pooled`` in front of DATABASE; (process, its URL)."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.access(binary, os.X_OK):
        sys.exit("pgbouncer is not installed: apt-get install -y pgbouncer")
    server = urlsplit(base)
    user = server.username or "postgres"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
pooled = host={server.hostname or "127.0.0.1"} port={server.port or 5432} dbname={DATABASE} \
user={user} pool_mode=transaction

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
default_pool_size = 4
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
"""
    )
    for name in ("users.txt", "pgbouncer.ini"):
        (folder / name).chmod(0o644)
    as_user = ["-u", pwd.getpwnam("postgres").pw_name] if os.geteuid() == 0 else []
    with (folder / "pgbouncer.log").open("wb") as log:
        process = subprocess.Popen(
            [binary, *as_user, str(folder / "pgbouncer.ini")], stdout=log, stderr=log
        )
    url = f"postgres://{user}@127.0.0.1:{port}/pooled"
    import psycopg

    deadline = time.monotonic() + 15.0
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return process, url
        except psycopg.OperationalError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                sys.exit(f"pgbouncer did not start: {(folder / 'pgbouncer.log').read_text()}")
            time.sleep(0.05)


def measure(name: str, env: dict[str, str], samples: int, probes: Path) -> dict[str, Any]:
    """One idle worker run as ``env`` says; the latency of ``samples`` probes."""
    from django_workers import System, submit_task

    run = uuid.uuid4().hex[:8]
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "runworkers", "--concurrency", "4"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def submit(path: str, tag: str) -> None:
        submit_task(
            f"pooler-{run}-{tag}",
            "benchmarks.tasks.probe",
            System(),
            args=[path, tag],
            scope="global",
        )

    try:
        found = measure_latency(submit, str(probes), samples, GAP, timeout=15.0)
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    found["warned"] = "does not receive notices" in err
    print(
        f"{name:26s} p50 {found['p50_ms']:8.2f}  p95 {found['p95_ms']:8.2f}  "
        f"p99 {found['p99_ms']:8.2f} ms  (n={found['samples']}, LISTEN warning: "
        f"{'yes' if found['warned'] else 'no'})"
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="probes for each way")
    parser.add_argument("--json", type=Path, help="write the figures here")
    options = parser.parse_args()

    base = os.environ.get("BENCH_PG_URL", DEFAULT_PG)
    fresh_pg_database(base, DATABASE)
    direct = pg_url(base, DATABASE)
    env = dict(os.environ, PYTHONPATH=str(ROOT), DATABASE_URL=direct)
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    env.pop("BENCH_LISTEN_URL", None)
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--verbosity", "0"], env=env, check=True
    )
    os.environ.update(env)
    import django

    django.setup()

    WORK.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="pooler-", dir=WORK))
    bouncer, pooled = start_pgbouncer(base, folder)
    ways = {
        "direct": env,
        "pooled": {**env, "DATABASE_URL": pooled},
        "pooled + LISTEN_DATABASE": {**env, "DATABASE_URL": pooled, "BENCH_LISTEN_URL": direct},
    }
    results = {}
    try:
        for name, way in ways.items():
            results[name] = measure(name, way, options.samples, folder / "probes.txt")
    finally:
        bouncer.terminate()
        bouncer.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    if options.json:
        figures = {
            n: {k: v for k, v in r.items() if k != "latencies_ms"} for n, r in results.items()
        }
        options.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
