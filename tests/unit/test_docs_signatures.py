"""The call signatures the docs print in ``text`` blocks match the code's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import django_workers

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: A ``text`` block that starts with a public name and its parameters.
SIGNATURE = re.compile(r"```text\n(\w+)\((.*?)\)( -> [^\n]+)?\n```", re.DOTALL)


def documented_signatures() -> list[tuple[str, str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for name, params, _returns in SIGNATURE.findall(page.read_text()):
            if name in django_workers.__all__:
                found.append((page.name, name, params))
    return found


def shape(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_the_docs_print_signatures() -> None:
    names = {name for _page, name, _params in documented_signatures()}
    assert {"submit_task", "get_all_tasks", "TaskOptions"} <= names


@pytest.mark.parametrize(("page", "name", "params"), documented_signatures())
def test_a_documented_signature_is_the_real_one(page: str, name: str, params: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"def documented({params}): pass", namespace)
    documented = inspect.signature(namespace["documented"])  # type: ignore[arg-type]
    assert shape(documented) == shape(inspect.signature(getattr(django_workers, name)))
