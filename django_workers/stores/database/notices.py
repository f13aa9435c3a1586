"""Wake-ups and connections: the notification role of ``DatabaseWorkerStore``.

PostgreSQL workers LISTEN (``listen_params``, ``listening_connection``); SQLite
workers on one host are woken through the database file's sockets (``wake_file``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from django.db import DatabaseError, connections, transaction

from django_workers import local_wake
from django_workers.conf import workers_settings
from django_workers.exceptions import RuntimeInTransaction
from django_workers.stores.database.access import DatabaseAccess


class DatabaseNotices(DatabaseAccess):
    """How a runtime learns of new work and of cancels on this store's database."""

    def wake_file(self) -> str | None:
        connection = connections[self.using]
        # is_in_memory_db is SQLite's own (the vendor is checked first).
        if connection.vendor != "sqlite" or connection.is_in_memory_db():  # type: ignore[attr-defined]
            return None
        return str(connection.settings_dict["NAME"])

    def notify_enqueued(self, queues: Iterable[str]) -> None:
        wake_file = self.wake_file()
        if wake_file is not None:
            woken = list(queues)
            # After the commit: a worker woken earlier would not see the rows yet.
            transaction.on_commit(
                lambda: local_wake.send_enqueued(wake_file, woken), using=self.using
            )

    def listen_params(self) -> dict[str, Any] | None:
        alias = self.listen_alias()
        if alias is None:
            return None
        params = dict(connections[alias].get_connection_params())
        for django_only in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(django_only, None)
        return params

    def listen_alias(self) -> str | None:
        if self.vendor != "postgresql":
            return None
        chosen = workers_settings.LISTEN_DATABASE
        if chosen is False:
            return None
        # LISTEN_DATABASE pairs with DATABASE; a store on another alias listens there.
        if chosen is None or self.using != workers_settings.DATABASE:
            return self.using
        # Another engine cannot LISTEN (the system checks say so): poll.
        return chosen if connections[chosen].vendor == "postgresql" else None

    def send_notice(self, channel: str, payload: str) -> None:
        # Not this thread's connection: that may be the very connection that LISTENs,
        # and a session hears its own notices even where no other session would.
        connection = connections.create_connection(self.using)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [channel, payload])
        finally:
            connection.close()

    def check_runtime_start(self) -> None:
        connection = connections[self.using]
        if not connection.in_atomic_block:
            return
        # The runtime's threads have connections of their own: they cannot see the
        # transaction's uncommitted rows, and wait on its locks (SQLite's one write lock,
        # PostgreSQL's row locks) for as long as it stays open, which is forever if the
        # thread that holds it waits for them.
        raise RuntimeInTransaction(
            "A WorkerRuntime cannot run while this thread is inside a transaction (such as "
            "a django.test.TestCase): its threads cannot see the uncommitted tasks "
            "and wait for the transaction's locks forever. In tests, run the tasks in the "
            "test's own thread with django_workers.testing (run_tasks(), the `workers` pytest "
            "fixture or WorkersTestMixin), or use TransactionTestCase / "
            "@pytest.mark.django_db(transaction=True)."
        )

    @contextlib.contextmanager
    def listening_connection(self) -> Iterator[Any]:
        alias = self.listen_alias() or self.using
        connection = connections[alias]
        connection.ensure_connection()
        try:
            yield connection.connection
        finally:
            # The claims made on notice used this thread's connection of the store's alias.
            self.reset_connection()
            if alias != self.using:
                with contextlib.suppress(DatabaseError):
                    connection.close()

    def reset_connection(self) -> None:
        with contextlib.suppress(DatabaseError):
            connections[self.using].close()
