"""PostgreSQL LISTEN/NOTIFY: the notice format and the thread that listens.

Both the runtime (work to claim, cancels to deliver) and the handles waiting
for a task's end listen; this module is what they share. A listener thread
holds one connection, LISTENs on one channel and passes each payload on; it
reconnects with backoff. This module owns the payload format, which the
triggers of migration 0002 emit; read a payload with ``parse_notice()``, never
by hand. A payload is ``<kind>:<value>``:

- ``e:<queue>`` on ``django_workers``: a task of that queue became PENDING
  (tasks to claim). ``e:*`` is sent by the listener itself on (re)connecting:
  anything may have been missed, so every waiter looks again.
- ``c:<task id>`` on ``django_workers``: a RUNNING task was cancelled or its
  run superseded (a cancel to deliver).
- ``d:<task id>`` on ``django_workers_done``: a task ended (COMPLETED, FAILED
  or CANCELLED), for handles waiting on it.
- ``p:<token>`` on either channel: a listener's probe, sent by the listener
  itself to check that notices reach it; every other listener ignores it.

A listener with a ``probe`` trusts LISTEN only once its own probe, sent from
another connection through the store's alias as real notices are, came back.
Behind a pooler in transaction mode LISTEN succeeds on whichever server
session ran it, and notices go to whatever client holds that session next:
the listener then takes back its LISTEN, never LISTENs again and reports
itself ``deaf``, and its owner polls.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from django.db import DatabaseError

from django_workers.documentation import docs_url
from django_workers.local_wake import EVERY_QUEUE

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
#: A listener's check that notices reach it; the value is a token of its own.
PROBE = "p"
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

#: Seconds a new LISTEN waits for its probe before it is judged deaf. A direct
#: connection hears it within milliseconds; deaf is final, so the margin is wide.
PROBE_TIMEOUT = 3.0
#: Most UNLISTENs sent, each to whichever pooled session the pooler hands out, to
#: reach the one that ran the LISTEN.
UNLISTEN_TRIES = 20

#: ``send(channel, payload)``: a NOTIFY from another connection than the listener's.
Send = Callable[[str, str], None]


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

    ``probe``, if given, sends a NOTIFY the way real notices travel; after each
    LISTEN (the first and every reconnect) the listener waits up to
    ``PROBE_TIMEOUT`` for its own. If it never comes, the listener takes its
    LISTEN back, sets ``deaf``, calls ``on_deaf()`` and stops for good.
    ``ready`` is set while LISTEN is in place (and heard its probe); ``settled``
    once the first LISTEN was either, or the listener stopped.
    """

    def __init__(
        self,
        params: dict[str, Any],
        on_notify: Callable[[str], None],
        channel: str = CHANNEL,
        *,
        connect: Callable[[], AbstractContextManager[Any]] | None = None,
        probe: Send | None = None,
        on_deaf: Callable[[], None] | None = None,
    ) -> None:
        self._params = params
        self._channel = channel
        self._on_notify = on_notify
        self._connect = connect or self._own_connection
        self._probe = probe
        self._on_deaf = on_deaf
        self._stopped = threading.Event()
        self.ready = threading.Event()
        self.deaf = threading.Event()
        self.settled = threading.Event()
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
                    session = listen(conn, self._channel)
                    if self._probe is not None and not self._hears(conn):
                        if not self._stopped.is_set():
                            self._give_up(conn, session)
                        break
                    self.ready.set()
                    self.settled.set()
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
        self.ready.clear()
        self.settled.set()  # stopped: nothing more will be known
        if self.deaf.is_set() and self._on_deaf is not None:
            try:
                self._on_deaf()
            except Exception:  # the owner's report must not hide that it polls
                logger.exception("Reporting a LISTEN that hears nothing failed")

    def _hears(self, conn: Any) -> bool:
        assert self._probe is not None
        return hears(conn, self._channel, self._probe, self._stopped)

    def _give_up(self, conn: Any, session: int) -> None:
        """Take LISTEN back (see ``unlisten``) and mark this listener deaf, for good."""
        self.deaf.set()
        self.settled.set()
        try:
            reached = unlisten(conn, self._channel, session)
        except Exception as e:  # deaf all the same: never LISTEN again
            logger.info("UNLISTEN %s failed (%s)", self._channel, e)
            return
        if not reached:
            logger.info(
                "UNLISTEN %s did not reach the pooled session %d that ran LISTEN in %d tries; "
                "it may collect notices until the pooler closes it",
                self._channel,
                session,
                UNLISTEN_TRIES,
            )


def listen(conn: Any, channel: str) -> int:
    """LISTEN on ``conn``; the process id of the server session that ran it.

    In one transaction, so that a pooler runs both statements on the same session.
    """
    with conn.transaction():
        conn.execute(f"LISTEN {channel}")
        return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])


def hears(conn: Any, channel: str, probe: Send, stopped: threading.Event | None = None) -> bool:
    """Send a probe through ``probe`` and wait for it on ``conn``, which LISTENs on ``channel``.

    False if it did not come within ``PROBE_TIMEOUT`` (or ``stopped`` was set).
    Notices that come before it are dropped: once LISTEN is trusted, the listener's
    reconnect notice sends every waiter to look again.
    """
    token = Notice(PROBE, uuid.uuid4().hex).payload
    probe(channel, token)
    deadline = time.monotonic() + PROBE_TIMEOUT
    while not (stopped is not None and stopped.is_set()):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for note in list(conn.notifies(timeout=min(left, 0.5), stop_after=1)):
            if note.payload == token:
                return True
    return False


def unlisten(conn: Any, channel: str, session: int) -> bool:
    """UNLISTEN until the server session ``session`` ran it; False if it was never reached.

    Directly connected, the first try is that session. Through a pooler in
    transaction mode each try runs on a session it hands out, most often the
    one used last.
    """
    for _ in range(UNLISTEN_TRIES):
        with conn.transaction():
            conn.execute(f"UNLISTEN {channel}")
            if int(conn.execute("SELECT pg_backend_pid()").fetchone()[0]) == session:
                return True
    return False


def deaf_warning(listen_alias: str, main_alias: str, instead: str) -> str:
    """The one warning of a listener whose probe never came: the likely cause and the fix."""
    cause = (
        "a pooler in transaction mode between this process and PostgreSQL (PgBouncer's "
        "pool_mode = transaction runs LISTEN on whichever server session is free, and the "
        "notices go to whatever client uses that session next)"
    )
    if listen_alias != main_alias:
        cause += f", or alias {listen_alias!r} reaching another database than {main_alias!r}"
    return (
        f"LISTEN on database alias {listen_alias!r} does not receive notices sent through "
        f"alias {main_alias!r}: a test notice did not arrive within {PROBE_TIMEOUT:g} s. The "
        f"likely cause is {cause}. {instead} To be woken at once, set "
        "DJANGO_WORKERS['LISTEN_DATABASE'] to an alias that connects directly or through a "
        f"session-mode pool (see {docs_url('install', 'behind-pgbouncer')}); False polls "
        "without trying LISTEN."
    )
