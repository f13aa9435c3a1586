"""The named statements of ``statements/*.sql``, read once and filled in once.

Each file holds statements by name (a ``-- name:`` line, then comment lines
that document it, then its text), as Procrastinate keeps its queries: a
reader finds every statement a vendor is sent in one file. ``any.sql`` holds
what every database is sent alike; a vendor's own file overrides a name.

A statement's ``{...}`` holes are filled by ``statement``: the column lists
from the models (the decoders zip rows with the same lists, so the two cannot
drift), a fragment of the same file (``{record_select}``), and the parts a
call varies (an IN list's length, optional filters), which a builder in the
calling module makes because SQL has no placeholder for them. A statement is
filled once for each set of holes and kept.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from django_workers.models import WorkflowRecord
from django_workers.stores.sql.columns import _COLUMNS

STATEMENTS = Path(__file__).with_name("statements")
#: The fragments filled into other statements rather than sent on their own.
FRAGMENTS = ("record_select", "workflow_select", "visible_workflows")
_NAME = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """The statements of one file's ``text`` by name, without their comment lines."""
    parts = _NAME.split(text)
    found = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.split("\n")
        while lines and lines[0].startswith("--"):
            lines.pop(0)
        found[name] = "\n".join(lines).strip()
    return found


@functools.cache
def _texts(vendor: str) -> dict[str, str]:
    """The unfilled statements a ``vendor`` is sent, by name."""
    texts = parse((STATEMENTS / "any.sql").read_text())
    own = STATEMENTS / f"{vendor}.sql"
    if own.exists():
        texts |= parse(own.read_text())
    return texts


@functools.cache
def _models() -> dict[str, str]:
    """The holes the models fill: the task and workflow columns, as ``t`` and ``f``."""
    workflow = [f.column for f in WorkflowRecord._meta.concrete_fields]
    return {
        "task_columns": ", ".join(f"t.{c}" for c in _COLUMNS),
        "workflow_columns": ", ".join(f"f.{c}" for c in workflow),
    }


@functools.cache
def _fragments(vendor: str) -> dict[str, str]:
    texts = _texts(vendor)
    return {name: texts[name].format(**_models()) for name in FRAGMENTS if name in texts}


@functools.cache
def statement(vendor: str, name: str, **holes: str) -> str:
    """The statement ``name`` for ``vendor``, its holes filled (kept for each set of holes)."""
    return _texts(vendor)[name].format(**_models(), **_fragments(vendor), **holes)


def names(vendor: str) -> list[str]:
    """The names of the statements ``vendor`` is sent, fragments left out."""
    return [name for name in _texts(vendor) if name not in FRAGMENTS]
