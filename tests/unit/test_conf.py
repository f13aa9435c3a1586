"""Settings are read lazily and re-read on ``setting_changed``; ``conf`` is a leaf module."""

from __future__ import annotations

import ast
from pathlib import Path

from django.test import override_settings

import django_workers.conf
from django_workers.conf import workers_settings
from django_workers.stores import default_store
from django_workers.stores.memory import InMemoryWorkerStore

MEMORY_STORE = "django_workers.stores.memory.InMemoryWorkerStore"


def test_override_settings_rebuilds_the_default_store() -> None:
    before = default_store()
    with override_settings(DJANGO_WORKERS={"STORE": MEMORY_STORE}):
        assert workers_settings.STORE == MEMORY_STORE
        assert isinstance(default_store(), InMemoryWorkerStore)
    assert type(default_store()) is type(before)


def test_conf_imports_nothing_of_the_package() -> None:
    tree = ast.parse(Path(django_workers.conf.__file__).read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("django_workers")]
