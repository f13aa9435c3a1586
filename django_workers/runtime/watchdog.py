"""One thread that fires run deadlines: ``TaskOptions(timeout=...)`` bounds the wait."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django_workers.runtime.run import RunHandle

logger = logging.getLogger(__name__)

#: The longest single wait, in seconds: a longer one overflows the platform's timeout.
WAIT_MAX = 3600.0


class Watchdog:
    """Calls ``on_expire(handle)`` when a run's deadline passes, on its own thread.

    It holds only the runs still going: ``unwatch`` forgets a run once it ends, so a
    busy worker whose tasks have long timeouts does not keep every finished run until
    its deadline. That bounds the watched runs by the runtime's slots, few enough that
    finding the next deadline is a scan.
    """

    def __init__(self, on_expire: Callable[[RunHandle], None]) -> None:
        self._on_expire = on_expire
        self._deadlines: dict[RunHandle, float] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="workers-watchdog", daemon=True)

    def __len__(self) -> int:
        """How many runs it watches now."""
        with self._cond:
            return len(self._deadlines)

    def start(self) -> None:
        self._thread.start()

    def watch(self, handle: RunHandle, timeout: float) -> None:
        with self._cond:
            self._deadlines[handle] = handle.started + timeout
            self._cond.notify()

    def unwatch(self, handle: RunHandle) -> None:
        """Forget ``handle``: its run ended, or its deadline no longer matters."""
        # No notify: a wait that ends at a forgotten deadline just finds nothing due.
        with self._cond:
            self._deadlines.pop(handle, None)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _loop(self) -> None:
        while (handle := self._next_due()) is not None:
            try:
                self._on_expire(handle)
            except Exception:  # one run's expiry; the deadlines of the others still fire
                logger.exception("Expiring the run of task %s failed; continuing", handle.task_id)

    def _next_due(self) -> RunHandle | None:
        """Wait for the next deadline to pass; its run (forgotten), or None once stopped."""
        with self._cond:
            while not self._stopped:
                if self._deadlines:
                    handle = min(self._deadlines, key=self._deadlines.__getitem__)
                    left = self._deadlines[handle] - time.monotonic()
                    if left <= 0:
                        del self._deadlines[handle]
                        return handle
                    self._cond.wait(min(left, WAIT_MAX))
                else:
                    self._cond.wait()
            return None
