"""Waking an idle runtime: PostgreSQL LISTEN/NOTIFY, a socket on SQLite, else a short poll.

A listener thread holds one connection, LISTENs on one channel and passes
each payload on; it reconnects with backoff. A runtime's listener holds its
thread's Django connection, through which the runtime also claims on notice.
This module owns the payload format, which the triggers of migration 0002
emit; read a payload with ``parse_notice()``, never by hand. A payload is
``<kind>:<value>``:

- ``e:<queue>`` on ``django_workers``: a task of that queue became PENDING
  (tasks to claim). ``e:*`` is sent by the listener itself on (re)connecting:
  anything may have been missed, so every waiter looks again.
- ``c:<task id>`` on ``django_workers``: a RUNNING task was cancelled or its
  run superseded (a cancel to deliver).
- ``d:<task id>`` on ``django_workers_done``: a task ended (COMPLETED, FAILED
  or CANCELLED), for handles waiting on it.

On SQLite a ``LocalListener`` receives ``e:<queue>`` datagrams that writers on
this machine send through ``local_wake`` after their commit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from django.db import DatabaseError

from django_workers.local_wake import EVERY_QUEUE, MAX_PATH, socket_path

logger = logging.getLogger(__name__)

#: Work for workers: ENQUEUED and CANCELLED notices.
CHANNEL = "django_workers"
#: Ends for waiting handles: ENDED notices. A channel of its own, so workers
#: are not woken for every task that ends.
DONE_CHANNEL = "django_workers_done"

#: The kinds of notice; the value is a queue name for ENQUEUED, a task id otherwise.
ENQUEUED = "e"
CANCELLED = "c"
ENDED = "d"
#: The ENQUEUED value that stands for every queue.
ANY_QUEUE = EVERY_QUEUE


class Notice(NamedTuple):
    """One NOTIFY payload, read: its kind (ENQUEUED, CANCELLED, ENDED) and value."""

    kind: str
    value: str

    @property
    def payload(self) -> str:
        return f"{self.kind}:{self.value}"

    @property
    def reconnected(self) -> bool:
        """True when the listener (re)connected and may have missed notices."""
        return self == RECONNECTED

    def is_work_for(self, queues: Collection[str] | None) -> bool:
        """True if there may be tasks to claim in one of ``queues`` (None: every queue)."""
        return self.kind == ENQUEUED and (
            self.value == ANY_QUEUE or queues is None or self.value in queues
        )


#: What the listener reports on (re)connecting: look again at everything.
RECONNECTED = Notice(ENQUEUED, ANY_QUEUE)


def parse_notice(payload: str) -> Notice:
    """Read ``<kind>:<value>``; an unknown kind is returned as is, for callers to ignore."""
    kind, _, value = payload.partition(":")
    return Notice(kind, value)


class Listener:
    """A thread that LISTENs and calls ``on_notify(payload)`` for each notification.

    ``connect``, if given, opens the connection to listen on: a context manager
    that yields a psycopg connection in autocommit and closes it on exit (by
    default a connection of its own, from ``params``). ``on_notify`` runs on this
    thread between two waits, so it may use that connection for queries.
    """

    def __init__(
        self,
        params: dict[str, Any],
        on_notify: Callable[[str], None],
        channel: str = CHANNEL,
        *,
        connect: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self._params = params
        self._channel = channel
        self._on_notify = on_notify
        self._connect = connect or self._own_connection
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

    def _own_connection(self) -> AbstractContextManager[Any]:
        import psycopg

        return psycopg.connect(**self._params, autocommit=True)

    def _loop(self) -> None:
        import psycopg

        delay = 0.5
        while not self._stopped.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(f"LISTEN {self._channel}")
                    self.ready.set()
                    delay = 0.5
                    # A wake-up on reconnect: anything sent while we were away is polled for.
                    self._on_notify(RECONNECTED.payload)
                    while not self._stopped.is_set():
                        # Each wait ends before its notices are handled: psycopg holds the
                        # connection while it waits, and a handler may send queries on it.
                        for note in list(conn.notifies(timeout=0.5, stop_after=1)):
                            self._on_notify(note.payload)
            except (psycopg.Error, DatabaseError) as e:
                self.ready.clear()
                # One line per outage (the runtime warns of the outage itself).
                log = logger.info if delay == 0.5 else logger.debug
                log("LISTEN connection lost (%s); reconnecting", str(e).strip().split("\n")[0])
                self._stopped.wait(delay / 2 + random.uniform(0, delay / 2))
                delay = min(delay * 2, 10.0)


class LocalListener:
    """A thread on a Unix datagram socket next to an SQLite file; calls ``on_notify(payload)``.

    The same-host stand-in for LISTEN: writers of the database find the socket in
    ``local_wake.wake_dir`` and send ``e:<queue>`` after their commit. ``ready`` is
    set once the socket is bound; a path too long for a socket, or a folder that
    cannot be made, leaves it unset and the runtime polls as before.
    """

    def __init__(self, database_file: str, name: str, on_notify: Callable[[str], None]) -> None:
        self._path = socket_path(database_file, name)
        self._on_notify = on_notify
        self._stopped = threading.Event()
        self._socket: socket.socket | None = None
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="workers-local-wake", daemon=True)

    def start(self) -> None:
        if len(os.fsencode(self._path)) > MAX_PATH:
            logger.info("Wake-up socket path too long (%s); polling instead", self._path)
            return
        try:
            self._path.parent.mkdir(exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(os.fspath(self._path))
            sock.settimeout(0.5)
        except OSError as e:
            logger.info("No wake-up socket at %s (%s); polling instead", self._path, e)
            return
        self._socket = sock
        self.ready.set()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self.ready.is_set():
            # Unlinked now, not when the thread notices: nobody sends to a stopped runtime.
            with contextlib.suppress(OSError):
                self._path.unlink()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        sock = self._socket
        assert sock is not None
        try:
            while not self._stopped.is_set():
                try:
                    payload = sock.recv(512)
                except TimeoutError:
                    continue
                except OSError:
                    break
                self._on_notify(payload.decode(errors="replace"))
        finally:
            self.ready.clear()
            sock.close()
            with contextlib.suppress(OSError):
                self._path.unlink()
