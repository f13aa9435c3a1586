"""Run ids: minted ahead in blocks, each one shaped like ``uuid.uuid4().hex`` and never reused."""

from __future__ import annotations

import os
import uuid

import pytest

from django_workers import submission


def test_run_ids_are_distinct_random_uuid_hex() -> None:
    ids = [submission.new_run_id() for _ in range(3 * submission._RUN_ID_BLOCK)]
    assert len(set(ids)) == len(ids)
    for run_id in ids:
        parsed = uuid.UUID(hex=run_id)
        assert parsed.hex == run_id
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_reuse_its_parents_minted_ids() -> None:
    submission._RUN_IDS.clear()
    submission.new_run_id()  # the parent now holds the other ids of a fresh block
    ahead = list(submission._RUN_IDS)
    assert ahead
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether its first id was one the parent holds
        os.close(read)
        os.write(write, b"1" if submission.new_run_id() in ahead else b"0")
        os._exit(0)
    os.close(write)
    reused = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert reused == b"0"
