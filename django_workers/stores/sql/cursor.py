"""Cursors for the hand-written statements: one psycopg cursor kept per connection.

The kept cursor is wrapped as Django wraps every cursor, so query logging,
execute wrappers, error translation and Django's async and thread checks
still apply; ``kept_fetch`` goes past the wrapper only while nothing watches it.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper


@contextlib.contextmanager
def _statements_cursor(connection: BaseDatabaseWrapper) -> Iterator[Any | None]:
    """Django's cursor where one query may hold several statements (client-side binding).

    None where psycopg binds on the server, which takes one statement a query.
    """
    with kept_cursor(connection) as cursor:
        yield cursor if isinstance(cursor.cursor, psycopg_client_cursor()) else None


#: For each Django connection to PostgreSQL: the psycopg connection it held when its
#: kept cursor was made, that cursor, and the time zone it reads timestamps in;
#: ``_KEPT_BOUND`` likewise for ``bound=True``.
_Kept = tuple[Any, Any, Any]
_KEPT: weakref.WeakKeyDictionary[BaseDatabaseWrapper, _Kept] = weakref.WeakKeyDictionary()
_KEPT_BOUND: weakref.WeakKeyDictionary[BaseDatabaseWrapper, _Kept] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def kept_cursor(connection: BaseDatabaseWrapper, *, bound: bool = False) -> Iterator[Any]:
    """Django's cursor for the hot statements, on PostgreSQL one psycopg cursor kept open.

    A new psycopg cursor looks up the adapter of every parameter type again on its
    first statement: with Django's wrapper made and closed around it, a quarter of the
    client time of a single submit. The kept cursor is wrapped as Django wraps every
    cursor (the async and thread-sharing checks, query logging, execute wrappers,
    error translation) and replaced once Django has reconnected or its time zone
    setting changed (``USE_TZ``, the database's ``TIME_ZONE``). It keeps its last
    result (at most one claim's rows) until its next statement. Other databases
    get Django's usual cursor.

    ``bound``: for a query of one statement, a cursor that sends the values apart
    from the query text (psycopg's server-side binding) even where the connection
    binds on the client, Django's default. Neither side then quotes the values into,
    or parses them out of, the text: a single submit measured about 7% faster, with
    an eighth less of the client's CPU. Nothing is ever prepared on it, whatever the
    connection's ``prepare_threshold`` (``DATABASES[...]["OPTIONS"]``): behind a
    pooler in transaction mode a statement prepared on one server session is
    missing on the next, or its name is taken there by another client's.
    """
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    yield _wrapped(connection, _kept_psycopg_cursor(connection, bound))


def _wrapped(connection: BaseDatabaseWrapper, cursor: Any) -> Any:
    """A psycopg cursor in Django's wrapper, which logs its queries where they are logged."""
    if connection.queries_logged:
        return connection.make_debug_cursor(cursor)
    return connection.make_cursor(cursor)


def kept_fetch(
    connection: BaseDatabaseWrapper, statement: str, params: Sequence[Any], *, one: bool = False
) -> Any:
    """Run one statement on the kept cursor binding on the server (PostgreSQL); its rows.

    ``one``: its first row alone. A submit and a claim, the two statements an idle
    worker's wake-up waits on, come this way. While nothing watches Django's cursors
    (no execute wrapper, no query logging, and ``CursorWrapper.execute`` as Django
    defines it: a monitoring tool that replaces it sees every statement), the
    statement goes to the psycopg cursor with what Django's wrapper would do around
    it: refuse a broken transaction, translate the driver's errors. Django's
    async and thread checks were made when the kept cursor was looked up. The
    wrapper is made and thrown away for each statement, and after an idle wait,
    its code no longer in the processor's caches, each of its steps costs
    several microseconds of the wake-up.
    """
    cursor = _kept_psycopg_cursor(connection, True)
    if (
        connection.execute_wrappers
        or connection.queries_logged
        or CursorWrapper.execute is not _DJANGO_EXECUTE
    ):
        wrapped = _wrapped(connection, cursor)
        wrapped.execute(statement, params)
        return wrapped.fetchone() if one else wrapped.fetchall()
    if connection.needs_rollback:
        connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor.execute(statement, params)
        return cursor.fetchone() if one else cursor.fetchall()


#: Django's own ``CursorWrapper.execute``, to tell whether a tool has replaced it.
_DJANGO_EXECUTE = CursorWrapper.execute


def _kept_psycopg_cursor(connection: BaseDatabaseWrapper, bound: bool) -> Any:
    """The psycopg cursor ``kept_cursor`` wraps, after Django's connection checks."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    # Where Django binds on the server already, its kept cursor binds on the server too.
    server_side = bool(getattr(connection.features, "uses_server_side_binding", False))
    bound = bound and not server_side
    table = _KEPT_BOUND if bound else _KEPT
    kept = table.get(connection)
    zone = connection.timezone
    if kept is None or kept[0] is not raw or kept[1].closed or kept[2] != zone:
        with connection.wrap_database_errors:
            # Django's own server-binding cursor would prepare at the connection's threshold;
            # its client-binding one never prepares.
            if bound or server_side:
                cursor = _server_bound_cursor(connection)
            else:
                cursor = connection.create_cursor()
        kept = table[connection] = (raw, cursor, zone)
    connection.validate_thread_sharing()
    return kept[1]


def _server_bound_cursor(connection: BaseDatabaseWrapper) -> Any:
    """A psycopg cursor binding on the server, reading timestamps as Django's cursors do.

    Django makes a connection read timestamps in its time zone (aware in UTC, or
    naive without ``USE_TZ``) and, where a setting changed since it connected,
    registers that zone on each new cursor; this cursor gets the same.
    """
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    raw = connection.connection
    cursor = _unprepared_cursor_class()(raw)
    timestamptz = raw.adapters.types["timestamptz"].oid
    if connection.timezone != raw.adapters.get_loader(timestamptz, Format.TEXT).timezone:
        register_tzloader(connection.timezone, cursor)
    return cursor


@functools.cache
def _unprepared_cursor_class() -> type:
    """psycopg's server-binding cursor, made never to prepare a statement."""
    import psycopg

    class UnpreparedCursor(psycopg.Cursor[Any]):
        def execute(
            self,
            query: Any,
            params: Any = None,
            *,
            prepare: bool | None = None,
            binary: bool | None = None,
        ) -> Any:
            """Execute, unprepared whatever ``prepare`` or the connection's threshold say."""
            return super().execute(query, params, prepare=False, binary=binary)

    return UnpreparedCursor


@functools.cache
def psycopg_client_cursor() -> type:
    """psycopg's client-side binding cursor class (several statements per execute)."""
    import psycopg

    return psycopg.ClientCursor
