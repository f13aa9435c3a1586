"""The bounds of every number and text the machinery carries, in one place.

A number a caller or a setting gives (a timeout, a backoff, a delayed start, a
concurrency limit) is refused past these bounds when it is submitted, built or
checked, so nothing downstream (a wait, a date, a database integer) overflows.
Every text column is as wide as the longest value the system accepts or makes;
the system's own text (error messages, tracebacks, host names) is cut to fit
when it is written. Pure: no Django, no settings.
"""

from __future__ import annotations

from typing import Final

#: The longest duration anything takes in seconds (timeouts, backoffs, settings): ten years.
SECONDS_MAX: Final = 10 * 365 * 24 * 3600
#: How far from now a task's ``run_after`` may be, either way, in seconds: ten years.
RUN_AFTER_MAX: Final = SECONDS_MAX
#: The largest cluster-wide concurrency limit of a queue.
CONCURRENCY_MAX: Final = 10_000
#: The largest count a setting may give (rows, bytes): what a database integer holds.
COUNT_MAX: Final = 2**31 - 1
#: The most run threads per process, and processes, one ``runworkers`` starts.
RUNWORKERS_MAX: Final = 1000

#: Column widths, in characters (PostgreSQL varchar and MySQL utf8mb4 count characters).
TASK_PATH_MAX_LENGTH: Final = 300
QUEUE_MAX_LENGTH: Final = 100
#: A workflow node's name; its record's ``node`` column also holds its undo's label.
NODE_NAME_MAX_LENGTH: Final = 64
NODE_LABEL_MAX_LENGTH: Final = 80
WORKER_ID_MAX_LENGTH: Final = 64
HOST_MAX_LENGTH: Final = 255
#: A periodic schedule's cron expression and time zone name, as declared.
CRON_MAX_LENGTH: Final = 200
TIME_ZONE_MAX_LENGTH: Final = 64

#: The most of a failure's message and traceback a record keeps (JSON, but bounded).
ERROR_MESSAGE_MAX_LENGTH: Final = 4000
TRACEBACK_MAX_LENGTH: Final = 20_000
CUT_MARK: Final = "[...]"


def storable(text: str) -> str:
    """``text`` as every database can keep it: no NUL, no lone surrogate (both escaped)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode()
    except UnicodeEncodeError:
        # A lone surrogate: PostgreSQL and MySQL refuse it; write it as its escape.
        text = text.encode("utf-8", "backslashreplace").decode()
    return text


def fit(text: str, width: int, *, keep_ends: bool = False) -> str:
    """``storable(text)`` cut to ``width`` characters, marked where it was cut.

    ``keep_ends`` cuts out the middle instead of the end: a traceback's first lines
    say where it started, its last ones what was raised.
    """
    text = storable(text)
    if len(text) <= width:
        return text
    kept = width - len(CUT_MARK)
    if not keep_ends:
        return text[:kept] + CUT_MARK
    return text[: kept // 2] + CUT_MARK + text[len(text) - (kept - kept // 2) :]
