"""Run ids: minted ahead in blocks, each one shaped like ``uuid.uuid4().hex`` and never reused."""

from __future__ import annotations

import os
import uuid

import pytest

from django_workers import core
from tests.helpers import answer_in_forked_child


def test_run_ids_are_distinct_random_uuid_hex() -> None:
    ids = [core.new_run_id() for _ in range(3 * core._RUN_ID_BLOCK)]
    ids += core.new_run_ids(5) + core.new_run_ids(4 * core._RUN_ID_BLOCK)
    assert len(set(ids)) == len(ids)
    for run_id in ids:
        parsed = uuid.UUID(hex=run_id)
        assert parsed.hex == run_id
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_reuse_its_parents_minted_ids() -> None:
    core._RUN_IDS.clear()
    core.new_run_id()  # the parent now holds the other ids of a fresh block
    ahead = list(core._RUN_IDS)
    assert ahead
    # The child reports whether its first id was one the parent holds.
    assert answer_in_forked_child(lambda: core.new_run_id() in ahead) is False
