"""A fake LISTEN connection, for the tests of the listener's probe without a pooler."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg


class Note(NamedTuple):
    channel: str
    payload: str


class FakeConnection:
    """A LISTEN connection: hears what ``deliver`` queues, or, deaf, nothing."""

    def __init__(self, *, session: int = 7, lost_after_probe: bool = False) -> None:
        self.session = session
        self.statements: list[str] = []
        self.lost_after_probe = lost_after_probe
        self._queued: list[Note] = []
        self._delivered = False
        self._arrived = threading.Condition()

    def deliver(self, channel: str, payload: str) -> None:
        with self._arrived:
            self._queued.append(Note(channel, payload))
            self._delivered = True
            self._arrived.notify_all()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        yield

    def execute(self, statement: str) -> Any:
        self.statements.append(statement)
        session = self.session
        return type("Result", (), {"fetchone": lambda self: (session,)})()

    def notifies(self, timeout: float, stop_after: int) -> Iterator[Note]:
        with self._arrived:
            if not self._queued:
                self._arrived.wait(timeout)  # psycopg blocks this long for a notice
            found, self._queued = self._queued, []
        if not found and self.lost_after_probe and self._delivered:
            raise psycopg.OperationalError("server closed the connection (a test's)")
        yield from found

    def count(self, verb: str) -> int:
        return sum(1 for s in self.statements if s.startswith(verb))
