"""Command-line argument types of the management commands: each validates one value.

Used as ``type=`` in ``add_argument``; a bad value is an ``ArgumentTypeError``,
which argparse reports with the option's name and exit code 2.
"""

from __future__ import annotations

import argparse

from django_workers.api import MAX_LIMIT
from django_workers.authority import Owner
from django_workers.bounds import RUNWORKERS_MAX, SECONDS_MAX
from django_workers.exceptions import InvalidTaskKey
from django_workers.info import TaskStatus


def positive_int(value: str) -> int:
    number = int(value)
    if not 1 <= number <= RUNWORKERS_MAX:
        raise argparse.ArgumentTypeError(f"must be from 1 to {RUNWORKERS_MAX}, got {number}")
    return number


def port(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port from 1 to 65535, got {number}")
    return number


def seconds(value: str) -> float:
    number = float(value)
    if not 0 <= number <= SECONDS_MAX:  # NaN too
        raise argparse.ArgumentTypeError(
            f"must be from 0 to {SECONDS_MAX} seconds (ten years), got {value}"
        )
    return number


def queue_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more queue names separated by commas")
    return names


def task_status(value: str) -> TaskStatus:
    try:
        return TaskStatus(value.upper())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a status; use one of {', '.join(TaskStatus.values)}"
        ) from None


def limit(value: str) -> int:
    number = int(value)
    if not 1 <= number <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_LIMIT}, got {number}")
    return number


def owner(value: str) -> Owner:
    try:
        return Owner(value)
    except InvalidTaskKey as e:
        raise argparse.ArgumentTypeError(str(e)) from e
