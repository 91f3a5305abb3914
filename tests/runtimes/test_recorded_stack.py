"""stack_records: the head and records of a stack a runtime's kernel half recorded."""

import struct

from hotstack.bpf import schema
from hotstack.bpf.record import Record
from hotstack.runtimes.common.recorded_stack import stack_records

HEAD = Record("t_stack", "<II", ("len", "pid"), 8)
# a u64 then a u32: C pads the struct to 16 bytes, the format ends at 12
ITEM = Record("t_item", "<QI", ("a", "b"), 16)


def _raw(count: int, stored: int) -> bytes:
    """A t_stack whose head says `count` records and that holds `stored` of them, padding 0xEE."""
    items = b"".join(struct.pack("<QI", 100 + i, i) + b"\xee" * 4 for i in range(stored))
    return HEAD.pack(len=count, pid=7) + items


def test_records_follow_at_their_c_size():
    head, records = stack_records(_raw(3, 3), HEAD, ITEM, 10, 8)
    assert (head.len, head.pid) == (3, 7)
    assert list(records) == [(100, 0), (101, 1), (102, 2)]


def test_at_most_the_head_the_limit_and_the_bytes_say():
    assert len(list(stack_records(_raw(2, 5), HEAD, ITEM, 10, 8)[1])) == 2     # the head's len
    assert len(list(stack_records(_raw(5, 5), HEAD, ITEM, 3, 8)[1])) == 3      # the most
    assert len(list(stack_records(_raw(5, 4), HEAD, ITEM, 10, 8)[1])) == 4     # what raw holds
    assert list(stack_records(_raw(5, 0), HEAD, ITEM, 10, 8)[1]) == []


def test_a_schema_stack():
    frame = dict(iseq=1, pc=2, me=3, flags=4)
    raw = (schema.RB_STACK.pack(len=2, truncated=1, pid=9)[:schema.RB_STACK_TAIL_OFFSET]
           + schema.RB_FRAME.pack(**frame) * 2)
    head, records = stack_records(raw, schema.RB_STACK, schema.RB_FRAME, schema.RB_MAX_FRAMES,
                                  schema.RB_STACK_TAIL_OFFSET)
    assert (head.len, head.truncated, head.pid) == (2, 1, 9)
    assert [dict(zip(schema.RB_FRAME.fields, r)) for r in records] == [frame, frame]
