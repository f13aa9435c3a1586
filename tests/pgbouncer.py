"""A PgBouncer process of a test's own, in front of this session's PostgreSQL test database.

Debian's ``pgbouncer`` package (``apt-get install -y pgbouncer``); ``.ci/run``
installs it. PgBouncer refuses to run as root, so under root it is started with
``-u`` as the ``postgres`` user (else ``nobody``), its files readable by that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from django.db import connection

from tests.helpers import wait_until

#: The pgbouncer binary, or None: Debian installs it in /usr/sbin, off a user's PATH.
BINARY = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
)

#: The two pools in front of the test database: (pool name, pool_mode).
TRANSACTION, SESSION = "pooled_tx", "pooled_session"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One pgbouncer in front of the test database: a transaction pool and a session pool.

    ``pool_size`` server connections per pool, fewer than the clients of a test, so
    that clients take turns on the same server sessions as they do in production.
    """

    def __init__(self, pool_size: int = 2) -> None:
        assert BINARY is not None
        db = connection.settings_dict
        self.user = str(db["USER"] or "postgres")
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="workers-pgbouncer-"))
        self.folder.chmod(0o755)
        upstream = (
            f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} "
            f"dbname={db['NAME']} user={self.user}"
        )
        self._write(
            "pgbouncer.ini",
            f"""[databases]
{TRANSACTION} = {upstream} pool_mode=transaction
{SESSION} = {upstream} pool_mode=session

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.folder / "users.txt"}
default_pool_size = {pool_size}
max_client_conn = 500
ignore_startup_parameters = extra_float_digits,options
""",
        )
        self._write("users.txt", f'"{self.user}" ""\n')
        self.log_path = self.folder / "pgbouncer.log"
        command = [BINARY, *self._as_user(), str(self.folder / "pgbouncer.ini")]
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(self._answers, timeout=15.0, interval=0.05)
        except AssertionError:
            self.stop()
            raise AssertionError(f"pgbouncer did not start:\n{self.log()}") from None

    def _write(self, name: str, text: str) -> None:
        path = self.folder / name
        path.write_text(text)
        path.chmod(0o644)

    def _as_user(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                return ["-u", pwd.getpwnam(name).pw_name]  # KeyError: no such user
        raise AssertionError("pgbouncer refuses root, and there is no postgres or nobody user")

    def _answers(self) -> bool:
        import psycopg

        if self.popen.poll() is not None:
            raise AssertionError(f"pgbouncer exited {self.popen.returncode}:\n{self.log()}")
        try:
            with psycopg.connect(**self.params(TRANSACTION), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def params(self, pool: str) -> dict[str, Any]:
        return {"host": "127.0.0.1", "port": self.port, "dbname": pool, "user": self.user}

    def url(self, pool: str) -> str:
        """The database URL of one of the pools, for ``DATABASE_URL``."""
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{pool}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Stop pgbouncer; its server connections to the test database close with it."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10.0)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10.0)
        shutil.rmtree(self.folder, ignore_errors=True)
