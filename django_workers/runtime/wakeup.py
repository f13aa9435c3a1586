"""Waking an idle runtime: PostgreSQL LISTEN/NOTIFY, or a short poll everywhere else.

On PostgreSQL a trigger (migration 0002) sends NOTIFY on the ``django_workers``
channel when a task becomes PENDING (``e:<queue>``) or is cancelled while
RUNNING (``c:<task id>``), and on ``django_workers_done`` when it ends
(``d:<task id>``). A listener thread holds
one extra connection and turns those into calls; it reconnects with backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

logger = logging.getLogger(__name__)

#: Work for workers: ``e:<queue>`` (tasks to claim) and ``c:<task id>`` (a cancel).
CHANNEL = "django_workers"
#: Ends for waiting handles: ``d:<task id>``. A channel of its own, so workers
#: are not woken for every task that ends.
DONE_CHANNEL = "django_workers_done"


def listen_params(alias: str) -> dict[str, Any] | None:
    """psycopg connection parameters for ``alias``, or None if it is not PostgreSQL."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return None
    params = dict(connection.get_connection_params())
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    return params


class Listener:
    """A thread that LISTENs and calls ``on_notify(payload)`` for each notification."""

    def __init__(
        self, params: dict[str, Any], on_notify: Callable[[str], None], channel: str = CHANNEL
    ) -> None:
        self._params = params
        self._channel = channel
        self._on_notify = on_notify
        self._stopped = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="workers-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to close its connection, after ``stop()``."""
        self._thread.join(timeout)

    def _loop(self) -> None:
        import psycopg

        delay = 0.5
        while not self._stopped.is_set():
            try:
                with psycopg.connect(**self._params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {self._channel}")
                    self.ready.set()
                    delay = 0.5
                    # A wake-up on reconnect: anything sent while we were away is polled for.
                    self._on_notify("e:*")
                    while not self._stopped.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self._on_notify(note.payload)
            except psycopg.Error as e:
                self.ready.clear()
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1f s", e, delay)
                self._stopped.wait(delay)
                delay = min(delay * 2, 10.0)
