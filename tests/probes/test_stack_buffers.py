"""The pure parts of reading event stacks (no BPF needed)."""

from __future__ import annotations

import struct

from hotstack.sampling.obi import trace_labels
from hotstack.sampling.stack_buffers import EVENT_KEY, parse_stack, with_caller


def test_caller_is_put_after_the_leaf_once():
    assert with_caller((0x10, 0x30), 0x20) == (0x10, 0x20, 0x30)
    # A kernel that already reports the caller at a function's entry: no duplicate.
    assert with_caller((0x10, 0x20, 0x30), 0x20) == (0x10, 0x20, 0x30)
    assert with_caller((0x10,), 0) == (0x10,)
    assert with_caller((), 0x20) == ()


def test_stack_map_values_end_at_the_first_zero():
    raw = struct.pack("<5Q", 1, 2, 3, 0, 0)
    assert parse_stack(raw) == (1, 2, 3)


def test_event_key_layout_matches_event_counts_h():
    # pid, tid, user stack id, kernel stack id, caller, trace id, span id: 56 bytes, no padding.
    assert EVENT_KEY.size == 4 + 4 + 4 + 4 + 8 + 16 + 8


def test_trace_labels_hex_and_absent_when_zero():
    assert trace_labels(bytes(16), bytes(8)) == ()
    assert trace_labels(bytes(range(16)), bytes(range(8))) == (
        ("trace_id", "000102030405060708090a0b0c0d0e0f"), ("span_id", "0001020304050607"))
