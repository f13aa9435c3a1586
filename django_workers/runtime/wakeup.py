"""Waking an idle runtime: PostgreSQL LISTEN/NOTIFY, a socket on SQLite, else a short poll.

A runtime's listener (``notices.Listener``) holds its thread's Django
connection, through which the runtime also claims on notice. On SQLite a
``LocalListener`` receives ``e:<queue>`` datagrams that writers on this
machine send through ``local_wake`` after their commit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from django_workers import local_wake
from django_workers.conf import workers_settings
from django_workers.local_wake import MAX_PATH, socket_path
from django_workers.notices import Send, hears, listen, unlisten

logger = logging.getLogger(__name__)


def notices_arrive(params: dict[str, Any], channel: str, probe: Send) -> bool:
    """LISTEN on a connection of its own from ``params``, probe it, take LISTEN back: heard?"""
    import psycopg

    with psycopg.connect(**params, autocommit=True) as conn:
        session = listen(conn, channel)
        heard = hears(conn, channel, probe)
        unlisten(conn, channel, session)
        return heard


def wake_up_text(store: Any, poll_interval: float, *, deaf: bool = False) -> str:
    """How an idle worker of ``store`` learns of new work, as the banner and status say it.

    ``deaf``: its listener's probe never came (``Listener.deaf``).
    """
    poll = f"polling every {poll_interval:g} s"
    if store.listen_params() is not None:
        if deaf:
            return f"{poll} (LISTEN receives no notices)"
        alias = store.listen_alias()
        return "LISTEN/NOTIFY" + ("" if alias == store.using else f" on alias {alias!r}")
    if (wake_file := store.wake_file()) is not None:
        folder = local_wake.wake_dir(wake_file)
        if not local_wake.socket_fits(wake_file):
            return f"{poll} (a socket path in {folder} would be too long)"
        return f"same-host socket in {folder}, {poll} as fallback"
    if workers_settings.LISTEN_DATABASE is False and getattr(store, "vendor", "") == "postgresql":
        return f"{poll} (LISTEN_DATABASE is False)"
    return poll


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
