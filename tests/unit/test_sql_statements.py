"""The named statements of ``stores/sql/statements``: each one parses and fills in."""

from __future__ import annotations

import pytest

from django_workers.stores.sql import encode, queries

VENDORS = ("postgresql", "sqlite", "mysql")
#: The holes a call fills, with a value of the shape its builder makes.
CALL_HOLES = {
    "queue_filter": "",
    "filters": "",
    "ids": "%s",
    "columns": "id",
    "assignments": "state = %s",
    "owner": "owner = %s",
    "served": "SELECT %s::text AS name",
    "queues": "SELECT 1",
    "n": "0",
}


def test_a_file_names_its_statements_and_leaves_their_comments_out() -> None:
    text = "-- head\n\n-- name: one\n-- what it is\nSELECT 1\n\n-- name: two\nSELECT\n  2\n"
    assert queries.parse(text) == {"one": "SELECT 1", "two": "SELECT\n  2"}


@pytest.mark.parametrize("vendor", VENDORS)
def test_every_statement_fills_in_with_the_holes_it_names(vendor: str) -> None:
    for name in queries.names(vendor):
        text = queries._texts(vendor)[name]
        holes = {h: v for h, v in CALL_HOLES.items() if "{" + h + "}" in text}
        filled = queries.statement(vendor, name, **holes)
        assert "{" not in filled.replace("'{}'", ""), (vendor, name)
        assert ";\n" not in filled, (vendor, name)  # joined by ";\n" into one query


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_a_single_insert_binds_the_columns_a_submit_binds(vendor: str) -> None:
    assert queries.statement(vendor, "insert_task").count("%s") == len(encode._BOUND)
