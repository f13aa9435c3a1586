"""One thread that fires run deadlines: ``TaskOptions(timeout=...)`` bounds the wait."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from django_workers.runtime.run import RunHandle


class Watchdog:
    """Calls ``on_expire(handle)`` when a run's deadline passes, on its own thread."""

    def __init__(self, on_expire: Callable[[RunHandle], None]) -> None:
        self._on_expire = on_expire
        self._heap: list[tuple[float, int, RunHandle]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="workers-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def watch(self, handle: RunHandle, timeout: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (handle.started + timeout, next(self._order), handle))
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    delay = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(delay)
                if self._stopped:
                    return
                _deadline, _n, handle = heapq.heappop(self._heap)
            self._on_expire(handle)
