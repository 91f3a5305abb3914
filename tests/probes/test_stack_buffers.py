"""The pure parts of reading event stacks (no BPF needed)."""

from __future__ import annotations

import struct

import pytest

from hotstack.sampling.obi import trace_labels
from hotstack.bpf import object_path, schema
from hotstack.sampling.buffers import parse_stack, with_caller


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
    """The generated records (bpf/schema.py) against the maps every committed object declares."""
    from hotstack.ebpf import load_spec

    for name in ("profile", "probe", "offcpu"):
        spec = load_spec(object_path(name))
        counts = spec.maps["counts_0"]
        assert (counts.key_size, counts.value_size) == (schema.STACK_KEY.size, schema.STACK_COUNT.size), name
        assert (spec.maps["traces_ctx_v1"].key_size, spec.maps["traces_ctx_v1"].value_size) == (
            8, schema.TRACE_CONTEXT.size)
        assert spec.maps["stats"].max_entries == schema.STAT_MAX
    assert load_spec(object_path("offcpu")).maps["off_cpu_threads"].value_size == schema.OFF_CPU.size
    profile = load_spec(object_path("profile"))
    assert profile.maps["python_procs"].value_size == schema.PY_PROC.size
    assert profile.maps["py_stacks_0"].value_size == schema.PY_STACK.size


def test_records_are_read_by_field_name():
    key = schema.STACK_KEY.pack(pid=7, tid=8, user_stack_id=-1, kern_stack_id=3, trace_id=b"t" * 16)
    assert len(key) == schema.STACK_KEY.size
    r = schema.STACK_KEY.unpack(key)
    assert (r.pid, r.tid, r.user_stack_id, r.kern_stack_id, r.runtime_stack, r.trace_id) == (7, 8, -1, 3, 0, b"t" * 16)


def test_trace_labels_hex_and_absent_when_zero():
    assert trace_labels(bytes(16), bytes(8)) == ()
    assert trace_labels(bytes(range(16)), bytes(range(8))) == (
        ("trace_id", "000102030405060708090a0b0c0d0e0f"), ("span_id", "0001020304050607"))


def test_generated_header_and_module_are_current():
    """bpf/schema.h and bpf/schema.py are what bpf/schema.yaml generates (`make generate`)."""
    from hotstack.bpf import generate
    assert generate.main(["--check"]) == 0


def test_schema_layout_has_c_alignment():
    """The generator pads as C does: a u64 after a u32 starts at 8, structs end aligned."""
    from hotstack.bpf.generate import Layout
    layout = Layout({"structs": {"a": [{"name": "x", "type": "u32"}, {"name": "y", "type": "u64"}],
                                 "b": [{"name": "inner", "type": "a"}, {"name": "c", "type": "u8"}]}})
    assert (layout.size["a"], layout.size["b"]) == (16, 24)
    assert layout.flat["a"] == ("I4xQ", ["x", "y"])


def test_native_unwinder_layouts_match_the_committed_objects():
    """The native unwinder's records (bpf/schema.yaml) against the maps its programs declare."""
    import numpy as np

    from hotstack.ebpf import load_spec
    from hotstack.unwind.kernel_maps import STAT_NAMES
    from hotstack.unwind.kernel_tables import RULE_DTYPE, rule

    for name in ("profile", "probe", "offcpu"):
        maps = load_spec(object_path(name)).maps
        assert (maps["nu_files"].key_size, maps["nu_files"].value_size) == (schema.NU_FILE_KEY.size,
                                                                            schema.NU_FILE.size), name
        assert maps["nu_missing"].value_size == schema.NU_MISSING_VALUE.size
        assert maps["nu_rules"].value_size == schema.NU_RULE.size == RULE_DTYPE.itemsize == 12
        assert maps["nu_procs"].value_size == schema.NU_RANGES.size
        assert maps["nu_remap"].value_size == schema.NU_REMAP_VALUE.size
        assert maps["nu_stats"].max_entries == schema.NU_STAT_MAX == len(STAT_NAMES)
        assert maps["nu_rule_cache"].max_entries == schema.NU_RULE_CACHE_SLOTS
        assert maps["native_stacks_0"].value_size == schema.NU_STACK_TAIL_OFFSET + 8 * schema.NU_STORED_FRAMES
        assert maps["native_tails_0"].value_size == 8 * (schema.NU_MAX_FRAMES - schema.NU_STORED_FRAMES)
    assert load_spec(object_path("mappings")).maps["nu_procs"].value_size == schema.NU_RANGES.size
    packed = np.array([rule(schema.NU_KIND_CFA_SP, 40000, schema.NU_RBP_SAME, -8)], RULE_DTYPE).tobytes()
    assert schema.NU_RULE.unpack(packed) == (schema.NU_KIND_CFA_SP, schema.NU_RBP_SAME, -8, 40000)


def test_generated_constants_keep_their_c_type():
    """A constant reaches C with the type a hand-written literal had: negative ones parenthesized,
    ones past int's range unsigned, ones past 32 bits unsigned long long."""
    from hotstack.bpf.generate import c_constant
    assert [c_constant(v) for v in (-32768, 10, 0xFFFF, 0xFFFFFFFF, 0xCBF29CE484222325)] == [
        "(-32768)", "10", "65535", "0xffffffffU", "0xcbf29ce484222325ULL"]


def test_numpy_columns_cover_every_byte():
    """A struct read as a numpy array names each byte: implicit padding is refused."""
    from hotstack.bpf.generate import Layout, columns
    layout = Layout({"structs": {"named": [{"name": "kind", "type": "u8"}, {"name": "pad", "type": "u8"},
                                           {"name": "cfa", "type": "s16"}],
                                 "gap": [{"name": "kind", "type": "u8"}, {"name": "cfa", "type": "s16"}]}})
    assert columns(layout, "named") == (("kind", "u1"), ("pad", "u1"), ("cfa", "<i2"))
    with pytest.raises(SystemExit):
        columns(layout, "gap")
