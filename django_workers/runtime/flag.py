"""An event flag that a signal handler may set, whatever the main thread was doing."""

from __future__ import annotations

import threading


class SignalSafeEvent:
    """``threading.Event``'s set, clear, is_set and wait, on a re-entrant lock.

    Python runs a signal handler in the main thread, between two steps of whatever
    it was doing. A handler that sets a ``threading.Event`` the main thread was
    setting, clearing or waiting on at that moment waits for a lock its own thread
    holds, forever: the group's SIGINT and the supervisor's forwarded stop reach a
    worker process together, so the second handler can run inside the first's
    ``set()``. The same thread may take this event's lock again.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the flag is set or ``timeout`` seconds pass; return the flag."""
        with self._cond:
            if not self._flag:
                self._cond.wait(timeout)
            return self._flag
