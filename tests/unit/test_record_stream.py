"""A ``RecordStream`` builds a batch's records when they are first read, once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_workers.stores.base import NewTask, RecordStream
from tests.factories import NewTaskFactory


class Source:
    """Records built on demand, counting how many were asked for; the last may fail."""

    def __init__(self, count: int, *, fail_at: int | None = None) -> None:
        self.count, self.fail_at, self.built = count, fail_at, 0

    def __iter__(self) -> Iterator[NewTask]:
        for n in range(self.count):
            if n == self.fail_at:
                raise ValueError(f"record {n} is bad")
            self.built += 1
            yield NewTaskFactory.build()


def test_its_length_is_known_before_a_record_is_built() -> None:
    source = Source(5)
    stream = RecordStream(5, source, plain=True)
    assert len(stream) == 5
    assert stream
    assert source.built == 0


def test_a_reader_builds_only_what_it_reads_and_a_second_reads_the_same_records() -> None:
    source = Source(5)
    stream = RecordStream(5, source, plain=True)
    reader = iter(stream)
    first, second = next(reader), next(reader)
    assert source.built == 2
    assert list(stream) == [first, second, *list(stream)[2:]]
    assert source.built == 5
    assert stream[4] is list(stream)[4]
    assert stream[-1] is stream[4]


def test_a_record_that_fails_fails_every_later_read() -> None:
    source = Source(5, fail_at=3)
    stream = RecordStream(5, source, plain=True)
    assert len([record for _, record in zip(range(3), stream, strict=False)]) == 3
    for read in (list, RecordStream.whole, lambda s: s[0]):
        with pytest.raises(ValueError, match="record 3 is bad"):
            read(stream)
    assert source.built == 3
