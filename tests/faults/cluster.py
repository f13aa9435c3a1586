"""A private PostgreSQL cluster: its own data directory, port and life, for one test session.

The fault tests stop, crash and restart it, so it is never the shared server
on 5432. ``initdb`` and ``postgres`` run as the ``postgres`` user when this
process is root (PostgreSQL refuses to run as root), as this user otherwise.
The server listens on 127.0.0.1 only, with trust authentication, ``fsync``
off and its socket in its own directory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

#: ``application_name`` of the test process's own connections: the cuts spare them.
TEST_APPLICATION = "faults-test"
#: ``application_name`` of the workers' connections.
WORKER_APPLICATION = "faults-worker"

#: How ``stop()`` signals the postmaster for each of pg_ctl's shutdown modes.
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``postgres``: $WORKERS_PG_BIN, else the newest Debian one."""
    given = os.environ.get("WORKERS_PG_BIN")
    if given:
        candidates = [Path(given)]
    else:
        found = Path("/usr/lib/postgresql").glob("*/bin")
        candidates = sorted(found, key=lambda p: _major(p.parent.name), reverse=True)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    return None


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at this moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateCluster:
    """``initdb`` a cluster in a temporary directory; start, stop, crash and restart it."""

    def __init__(self, bindir: Path, *, port: int | None = None) -> None:
        self._as = _server_user()
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="workers-faults-"))
        self.data = self.dir / "data"
        self.log_path = self.dir / "postgres.log"
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        if self._as is not None:
            os.chown(self.dir, self._as.pw_uid, self._as.pw_gid)
        # Whatever happens to the test session, no server is left behind.
        atexit.register(self.destroy)

    # -- life --

    def init(self) -> None:
        """Create the cluster (superuser ``postgres``, trust authentication, UTF-8)."""
        command = [
            str(self.bindir / "initdb"),
            f"--pgdata={self.data}",
            "--username=postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        done = subprocess.run(command, capture_output=True, text=True, **self._run_as())
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it accepts connections."""
        if self.running:
            return
        command = [
            str(self.bindir / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-k",
            str(self.dir),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
            # Workers hold concurrency + 5 connections each; killed ones linger a moment.
            "-c",
            "max_connections=300",
        ]
        with self.log_path.open("ab") as log:
            # Its own session: teardown kills the postmaster and its backends together.
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._run_as(),
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"postgres exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                with self.connect(connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"postgres did not accept connections within {timeout} s:\n"
                        f"{self.log_tail()}"
                    ) from None
                time.sleep(0.05)

    def stop(self, mode: str = "fast", timeout: float = 60.0) -> None:
        """Stop the server as ``pg_ctl stop -m <mode>`` would (``immediate`` is a crash)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(STOP_SIGNALS[mode])
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(
                f"postgres did not stop ({mode}) within {timeout} s; killed it"
            ) from None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        # Each backend is a session of its own (PostgreSQL calls setsid() in every child),
        # so the postmaster's process group does not hold them: find them by parent.
        children = _children(process.pid)
        for pid in [process.pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10.0)

    def destroy(self) -> None:
        """Kill the server for sure and delete its directory."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- databases and connections --

    def url(self, dbname: str, *, port: int | None = None, application: str = "") -> str:
        """A ``DATABASE_URL`` for ``dbname`` (through ``port`` if given, e.g. a proxy's)."""
        query = f"?application_name={application}" if application else ""
        return f"postgres://postgres@127.0.0.1:{port or self.port}/{dbname}{query}"

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> psycopg.Connection[Any]:
        """A psycopg connection of the test process (autocommit, spared by the cuts)."""
        kwargs.setdefault("connect_timeout", 5)
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname=dbname,
            autocommit=True,
            application_name=TEST_APPLICATION,
            **kwargs,
        )

    def create_database(self, name: str, template: str | None = None) -> None:
        _check_name(name)
        statement = f'CREATE DATABASE "{name}"'
        if template is not None:
            _check_name(template)
            statement += f' TEMPLATE "{template}"'
        with self.connect() as conn:
            conn.execute(statement)  # type: ignore[arg-type]

    def terminate_backends(self) -> int:
        """``pg_terminate_backend`` every client connection but the test process's; how many."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
                "AND application_name IS DISTINCT FROM %s",
                [TEST_APPLICATION],
            ).fetchone()
        return int(row[0]) if row else 0

    def _run_as(self) -> dict[str, Any]:
        if self._as is None:
            return {"env": _server_env()}
        return {
            "user": self._as.pw_uid,
            "group": self._as.pw_gid,
            "extra_groups": [],
            "env": _server_env(),
        }


def _server_user() -> pwd.struct_passwd | None:
    """Whom to run the server as: ``postgres`` when this process is root, else nobody else."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError(
            "PostgreSQL does not run as root and there is no 'postgres' user to run it as; "
            "create one (useradd --system postgres) or run the tests as another user."
        ) from None


def _children(pid: int) -> list[int]:
    """The pids of the processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "LC_"))}
    env["LC_ALL"] = "C"
    return env


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"Not a plain database name: {name!r}")
