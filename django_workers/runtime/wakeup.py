"""Waking an idle runtime: PostgreSQL LISTEN/NOTIFY, or a short poll everywhere else.

A listener thread holds one extra connection, LISTENs on one channel and
passes each payload on; it reconnects with backoff. This module owns the
payload format, which the triggers of migration 0002 emit; read a payload
with ``parse_notice()``, never by hand. A payload is ``<kind>:<value>``:

- ``e:<queue>`` on ``django_workers``: a task of that queue became PENDING
  (tasks to claim). ``e:*`` is sent by the listener itself on (re)connecting:
  anything may have been missed, so every waiter looks again.
- ``c:<task id>`` on ``django_workers``: a RUNNING task was cancelled or its
  run superseded (a cancel to deliver).
- ``d:<task id>`` on ``django_workers_done``: a task ended (COMPLETED, FAILED
  or CANCELLED), for handles waiting on it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any, NamedTuple

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
ANY_QUEUE = "*"


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
                    self._on_notify(RECONNECTED.payload)
                    while not self._stopped.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self._on_notify(note.payload)
            except psycopg.Error as e:
                self.ready.clear()
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1f s", e, delay)
                self._stopped.wait(delay)
                delay = min(delay * 2, 10.0)
