"""The cancellation token: why a run was asked to stop, first cause wins.

Nothing injects an exception into a running task. A run's token holds one
reason; ``none`` means not cancelled. Only the runtime sets it, through
``CancelToken._request`` (a compare-and-set from ``none``), so a shutdown that
fires on every run cannot overwrite a person's earlier cancel. The stored
message of a cancelled task is derived from the reason here and nowhere else.
"""

from __future__ import annotations

import threading
from enum import StrEnum


class CancelReason(StrEnum):
    """Why a run was asked to stop."""

    NONE = "none"
    USER = "user"
    TIMEOUT = "timeout"
    SUPERSEDED = "superseded"
    SHUTDOWN = "shutdown"
    #: A workflow node that will not run: a dependency failed, or the workflow failed fast.
    WORKFLOW = "workflow"
    #: A workflow node stopped because its workflow's deadline passed.
    DEADLINE = "deadline"


def cancel_message(reason: CancelReason | str, timeout: float | None = None) -> str:
    """Return the stored message for a cancel reason."""
    reason = CancelReason(reason)
    if reason is CancelReason.TIMEOUT:
        return f"Timed out after {timeout:g} s" if timeout is not None else "Timed out"
    return _MESSAGES[reason]


_MESSAGES = {
    CancelReason.NONE: "Not cancelled",
    CancelReason.USER: "Cancelled by user",
    CancelReason.SUPERSEDED: "Superseded by a re-run",
    CancelReason.SHUTDOWN: "Cancelled by worker shutdown",
    CancelReason.WORKFLOW: "Cancelled by its workflow: a dependency failed or was cancelled",
    CancelReason.DEADLINE: "Cancelled by its workflow's deadline",
}


class CancelToken:
    """A process-local flag with a reason, polled by the task; never reset."""

    __slots__ = ("_event", "_lock", "_observed", "_reason")

    def __init__(self) -> None:
        self._reason = CancelReason.NONE
        # Whether the task read the token after it was set: it then stopped because of it.
        self._observed = False
        self._lock = threading.Lock()
        # Made by the first wait: most runs never wait on their token, and an Event
        # (a Condition inside) costs a run's start more than the rest of the token.
        self._event: threading.Event | None = None

    @property
    def reason(self) -> CancelReason:
        return self._reason

    @property
    def requested(self) -> bool:
        return self._reason is not CancelReason.NONE

    @property
    def observed(self) -> bool:
        """True once the task read the token after it was set (``seen``)."""
        return self._observed

    def seen(self) -> CancelReason:
        """The reason, as the task reads it: a set token read by the task is observed."""
        reason = self._reason
        if reason is not CancelReason.NONE:
            self._observed = True
        return reason

    def wait(self, timeout: float | None) -> bool:
        """Block until the token is set or ``timeout`` passes; True if set."""
        with self._lock:
            event = self._event
            if event is None:
                event = self._event = threading.Event()
                if self._reason is not CancelReason.NONE:
                    event.set()
        return event.wait(timeout)

    def _request(self, reason: CancelReason) -> bool:
        """Set the reason if none is set yet; True if this call set it. Runtime only."""
        if reason is CancelReason.NONE:
            raise ValueError("A cancel request needs a reason other than 'none'.")
        with self._lock:
            if self._reason is not CancelReason.NONE:
                return False
            self._reason = reason
            event = self._event
        if event is not None:
            event.set()
        return True
