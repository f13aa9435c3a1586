"""Same-host wake-ups for SQLite: a submit tells this machine's idle workers at once.

SQLite has no LISTEN/NOTIFY, so an idle worker finds new work at its next poll
(``POLL_INTERVAL``). Next to the database file, a folder ``<file>.wake`` holds
one Unix datagram socket per listening runtime; after a commit that queued work,
the writer sends each socket one datagram, ``e:<queue>`` (the ``ENQUEUED``
notice of ``notices``). A folder that does not exist (no worker ever
listened) costs one failed ``scandir``; a socket nobody holds any more is
removed by the first sender that finds it dead. Polling stays the fallback:
a lost datagram only costs the poll it would have saved.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterable
from pathlib import Path

#: The queue name a notice uses for "every queue" (promotions name no queue).
EVERY_QUEUE = "*"
#: Longest socket path a Unix domain socket takes on Linux (108 with the NUL).
MAX_PATH = 107


def wake_dir(database_file: str | os.PathLike[str]) -> Path:
    """The folder of wake-up sockets of an SQLite database file."""
    return Path(f"{os.fspath(database_file)}.wake")


def runtime_socket_name() -> str:
    """A new name for a listening runtime's socket (without ``.sock``): pid and token.

    The pid is padded to the seven digits of Linux's largest, so every runtime's
    socket path next to one database file has the same length (``socket_fits``).
    """
    return f"{os.getpid():07d}-{uuid.uuid4().hex[:8]}"


def socket_path(database_file: str | os.PathLike[str], name: str) -> Path:
    """Where the listener called ``name`` binds its socket, next to ``database_file``."""
    return wake_dir(database_file) / f"{name}.sock"


def socket_fits(database_file: str | os.PathLike[str]) -> bool:
    """Whether a runtime's socket path next to ``database_file`` is short enough to bind.

    Every runtime's name has the same length, so a new one answers for all. Where
    the path is too long, a runtime polls instead (and logs that at INFO).
    """
    return len(os.fsencode(socket_path(database_file, runtime_socket_name()))) <= MAX_PATH


def send_enqueued(database_file: str | os.PathLike[str] | None, queues: Iterable[str]) -> None:
    """Tell the workers listening next to ``database_file`` that ``queues`` have work."""
    if not database_file:
        return
    try:
        entries = list(os.scandir(wake_dir(database_file)))
    except OSError:
        return  # nobody ever listened here
    if not entries:
        return
    payloads = [f"e:{queue}".encode() for queue in sorted(set(queues))]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for entry in entries:
            if entry.name.endswith(".sock"):
                _send(sender, entry.path, payloads)


def _send(sender: socket.socket, path: str, payloads: list[bytes]) -> None:
    for payload in payloads:
        try:
            sender.sendto(payload, path)
        except (ConnectionRefusedError, FileNotFoundError):
            # Its runtime is gone without cleaning up (killed): nobody will read it.
            with contextlib.suppress(OSError):
                os.unlink(path)
            return
        except OSError:
            return  # a full buffer means it is awake already; anything else: it polls
