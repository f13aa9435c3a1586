"""PostgreSQL: ``schema.sql`` is the schema the migrations make, read from the test database.

The PL/pgSQL functions the claim and the ends call, the triggers that notify
workers, and every index the statements rely on are written in migrations one
change at a time; ``schema.sql`` shows them as they are now, in one place.
"""

from __future__ import annotations

import difflib

import pytest
from django.db import connection

from tests.schema import REGENERATE, SCHEMA, dump

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="schema.sql is PostgreSQL's schema"
)


@pytest.mark.django_db
def test_schema_sql_is_the_migrated_databases_schema() -> None:
    current = dump(connection)
    committed = SCHEMA.read_text()
    diff = "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            current.splitlines(keepends=True),
            "schema.sql (committed)",
            "the migrated test database",
        )
    )
    assert not diff, f"{SCHEMA.name} is out of date; write it again with {REGENERATE}:\n{diff}"
