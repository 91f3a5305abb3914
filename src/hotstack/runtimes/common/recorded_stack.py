"""A stack a runtime's kernel half recorded (struct <runtime>_stack of bpf/schema.yaml): a head with
the number of records (`len`), then the records (frames or contexts) as the record's tail."""

from __future__ import annotations

import functools
import struct
from typing import Any, Iterator

from ...bpf.record import Record


@functools.cache
def _stride(record: Record) -> struct.Struct:
    """The record's format padded to its C size, so that records follow each other in it."""
    s = record.struct
    return s if s.size == record.size else struct.Struct(f"{s.format}{record.size - s.size}x")


def stack_records(raw: bytes, head: Record, record: Record, most: int, tail_offset: int
                  ) -> tuple[Any, Iterator[tuple]]:
    """(the head by field name, each record's fields in the record's order) of a recorded stack `raw`:
    the head's `len` records, at most `most` and no more than `raw` holds from `tail_offset`."""
    top = head.unpack(raw)
    size = record.size
    n = max(0, min(top.len, most, (len(raw) - tail_offset) // size))
    return top, _stride(record).iter_unpack(memoryview(raw)[tail_offset:tail_offset + n * size])
