"""Stores answer "what does the record say?"; ``default_store()`` is the one settings select."""

from __future__ import annotations

import threading
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from django_workers.conf import workers_settings
from django_workers.stores.base import (
    ANY_RUN,
    EndedCounts,
    NewTask,
    QueueAuthorizer,
    QueueCounts,
    Submitted,
    WatchAuthorizer,
    WorkerStore,
)

__all__ = [
    "ANY_RUN",
    "EndedCounts",
    "NewTask",
    "QueueCounts",
    "Submitted",
    "WorkerStore",
    "default_store",
    "reset_default_store",
    "set_queue_authorizer",
    "set_watch_authorizer",
]

_default: WorkerStore | None = None
_default_lock = threading.Lock()


def default_store() -> WorkerStore:
    """Return the store DJANGO_WORKERS["STORE"] names, built once, authorizers applied."""
    global _default
    built = _default
    if built is not None:  # built already: no lock to take
        return built
    with _default_lock:
        if _default is None:
            _default = _build_default()
        return _default


def reset_default_store() -> None:
    """Forget the default store, so the next call rebuilds it from the settings."""
    global _default
    with _default_lock:
        _default = None


@receiver(setting_changed)
def _reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    # The default store is built from DJANGO_WORKERS, so override_settings must rebuild it.
    if setting == "DJANGO_WORKERS":
        reset_default_store()


def _build_default() -> WorkerStore:
    store_class = import_string(workers_settings.STORE)
    store: WorkerStore = store_class()
    if workers_settings.QUEUE_AUTHORIZER:
        store.set_queue_authorizer(import_string(workers_settings.QUEUE_AUTHORIZER))
    if workers_settings.WATCH_AUTHORIZER:
        store.set_watch_authorizer(import_string(workers_settings.WATCH_AUTHORIZER))
    return store


def set_queue_authorizer(store: WorkerStore, fn: QueueAuthorizer | None) -> None:
    """Set ``fn(queue_name, user_id) -> bool`` on ``store``; None disables the check."""
    store.set_queue_authorizer(fn)


def set_watch_authorizer(store: WorkerStore, fn: WatchAuthorizer | None) -> None:
    """Set ``fn(task_id, watchers, user_id) -> bool`` on ``store``; None denies joins."""
    store.set_watch_authorizer(fn)
