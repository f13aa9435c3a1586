"""Check that a PostgreSQL or MySQL/MariaDB server answers, within a time limit.

Usage: python scripts/_db_ready.py DATABASE_URL [TIMEOUT_SECONDS]

Exits 0 when a connection to the URL's database succeeds and runs ``SELECT 1``;
otherwise prints the driver's reason on stderr and exits 1. Used by
``scripts/test`` and ``.ci/run`` before a test run, so an absent server is a
clear error instead of a hang or a wall of test failures.
"""

from __future__ import annotations

import sys
from urllib.parse import unquote, urlsplit


def check_postgres(url: str, timeout: int) -> None:
    """Connect with psycopg (libpq reads postgres:// URLs itself)."""
    import psycopg

    with psycopg.connect(url, connect_timeout=timeout) as conn:
        conn.execute("SELECT 1")


def check_mysql(url: str, timeout: int) -> None:
    """Connect with PyMySQL to the host, port, user and database of the URL."""
    import pymysql

    parts = urlsplit(url)
    conn = pymysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        database=parts.path.lstrip("/") or None,
        connect_timeout=timeout,
        read_timeout=timeout,
    )
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        conn.close()


CHECKS = {
    "postgres": check_postgres,
    "postgresql": check_postgres,
    "mysql": check_mysql,
    "mariadb": check_mysql,
}


def main(argv: list[str]) -> int:
    """Check the URL in argv[1]; return the process exit code."""
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    url, timeout = argv[1], int(argv[2]) if len(argv) == 3 else 5
    scheme = urlsplit(url).scheme.split("+")[0]
    check = CHECKS.get(scheme)
    if check is None:
        print(f"unsupported database URL scheme {scheme!r}", file=sys.stderr)
        return 2
    try:
        check(url, timeout)
    except Exception as e:  # any driver error means "not ready"; say which
        print(f"{type(e).__name__}: {str(e).strip()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
