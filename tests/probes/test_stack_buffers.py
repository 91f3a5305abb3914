"""The pure parts of reading event stacks (no BPF needed)."""

from __future__ import annotations

import struct

from hotstack.sampling.obi import trace_labels
from hotstack.sampling.stack_buffers import EVENT_KEY, EVENT_VALUE, parse_stack, with_caller


def test_caller_is_put_after_the_leaf_once():
    assert with_caller((0x10, 0x30), 0x20) == (0x10, 0x20, 0x30)
    # A kernel that already reports the caller at a function's entry: no duplicate.
    assert with_caller((0x10, 0x20, 0x30), 0x20) == (0x10, 0x20, 0x30)
    assert with_caller((0x10,), 0) == (0x10,)
    assert with_caller((), 0x20) == ()


def test_stack_map_values_end_at_the_first_zero():
    raw = struct.pack("<5Q", 1, 2, 3, 0, 0)
    assert parse_stack(raw) == (1, 2, 3)


def test_layouts_match_the_committed_objects():
    """The Python mirrors of event_counts.h/offcpu.bpf.c against the maps the objects declare."""
    from hotstack.ebpf import load_spec
    from hotstack.sampling import offcpu, probes

    for path in (probes.object_path(), offcpu.object_path()):
        spec = load_spec(path)
        assert (spec.maps["counts_0"].key_size, spec.maps["counts_0"].value_size) == (EVENT_KEY.size, EVENT_VALUE.size)
        assert (spec.maps["traces_ctx_v1"].key_size, spec.maps["traces_ctx_v1"].value_size) == (8, 24)
    entry = load_spec(offcpu.object_path()).maps["off_cpu_threads"].value_size
    assert entry == offcpu.OFF_CPU_ENTRY.size + 24   # then the OBI trace context


def test_trace_labels_hex_and_absent_when_zero():
    assert trace_labels(bytes(16), bytes(8)) == ()
    assert trace_labels(bytes(range(16)), bytes(range(8))) == (
        ("trace_id", "000102030405060708090a0b0c0d0e0f"), ("span_id", "0001020304050607"))
