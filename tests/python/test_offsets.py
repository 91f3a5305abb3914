"""_Py_DebugOffsets parsing: the 3.13 layout against a real 3.13 where present, the 3.14 layout
(published in CPython's pycore_debug_offsets.h; no 3.14 interpreter here) against a block built
from that header's field order."""

from __future__ import annotations

import struct

import pytest

from hotstack.runtimes.python.detect import inspect_binary
from hotstack.runtimes.python.offsets import (DEBUG_COOKIE, DEBUG_WORDS, FROM_DEBUG_OFFSETS, from_debug_offsets,
                                            table_offsets)
from pyframes_helpers import INTERPRETERS

# Field order of _Py_DebugOffsets in 3.14, block by block (each block starts with its size).
LAYOUT_314 = [
    ("cookie", "version", "free_threaded"),
    ("size", "finalizing", "interpreters_head"),
    ("size", "id", "next", "threads_head", "threads_main", "gc", "imports_modules", "sysdict", "builtins",
     "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked",
     "gil_runtime_state_holder"),
    ("size", "prev", "next", "interp", "current_frame", "thread_id", "native_thread_id", "datastack_chunk",
     "status"),
    ("size", "previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer"),
    ("size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount", "localsplusnames",
     "localspluskinds", "co_code_adaptive"),
    ("size", "ob_type"), ("size", "tp_name", "tp_repr", "tp_flags"), ("size", "ob_item", "ob_size"),
    ("size", "ob_item", "ob_size"), ("size", "used", "table", "mask"), ("size", "ma_keys", "ma_values"),
    ("size", "ob_fval"), ("size", "lv_tag", "ob_digit"), ("bytes_size", "bytes_ob_size", "bytes_ob_sval"),
    ("size", "state", "length", "asciiobject_size"), ("size", "collecting"),
    ("size", "gi_name", "gi_iframe", "gi_frame_state"),
]


def test_314_layout():
    words, values = [], {}
    block_names = ["head", "runtime", "interp", "tstate", "frame", "code"]
    for b, block in enumerate(LAYOUT_314):
        for field in block:
            values[(block_names[b] if b < len(block_names) else f"b{b}", field)] = len(words)
            words.append(1000 + len(words))
    words[1] = 0x030E00F0          # 3.14.0 final
    words[2] = 0                   # not free-threaded
    words += [0] * (DEBUG_WORDS - len(words))
    blob = DEBUG_COOKIE + struct.pack(f"<{DEBUG_WORDS - 1}Q", *words[1:])
    o = from_debug_offsets(blob)
    assert o is not None and o.version == (3, 14)
    w = lambda block, field: 1000 + values[(block, field)]  # noqa: E731
    assert o.interpreters_head == w("runtime", "interpreters_head")
    assert o.threads_head == w("interp", "threads_head")
    assert (o.tstate_frame, o.thread_id) == (w("tstate", "current_frame"), w("tstate", "thread_id"))
    assert (o.frame_previous, o.frame_code, o.frame_instr, o.frame_marker) == (
        w("frame", "previous"), w("frame", "executable"), w("frame", "instr_ptr"), w("frame", "owner"))
    assert (o.co_qualname, o.co_linetable, o.co_code_adaptive) == (
        w("code", "qualname"), w("code", "linetable"), w("code", "co_code_adaptive"))
    assert o.bytes_data == 1000 + values[("b14", "bytes_ob_sval")]
    assert o.ascii_data == 1000 + values[("b15", "asciiobject_size")]
    assert o.code_tag_mask == 7      # 3.14 frames hold tagged stack references
    assert o.source == FROM_DEBUG_OFFSETS and table_offsets((3, 14)).source == "table"


def test_313_from_the_interpreter():
    path = next((p for i, p in INTERPRETERS if i.endswith("3.13")), None)
    if path is None:
        pytest.skip("no CPython 3.13 on this machine")
    import glob
    import os
    libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(path)), "lib", "libpython3.13.so*"))
    binary = inspect_binary(libs[0] if libs else path)
    assert binary is not None and binary.version == (3, 13)
    o = binary.offsets
    # Read from the interpreter's _Py_DebugOffsets, not the 3.13 fallback table (same numbers):
    # a broken parse that fell back would pass the check below.
    assert o.source == FROM_DEBUG_OFFSETS, o.source
    # Measured on 3.13.0 (research notes, section 3.3).
    assert (o.tstate_frame, o.thread_id, o.frame_instr, o.frame_marker, o.co_code_adaptive) == (72, 152, 56, 70, 200)


def test_every_known_layout_fits_the_walkers_window():
    """bpf/python.h reads a frame's and a code object's fields in one read each (PY_WINDOW bytes)
    with aligned loads: every version of the table must fit, and a layout that does not is refused
    (no Python frames) rather than read wrong."""
    from dataclasses import replace

    from hotstack.runtimes.python.offsets import _TABLE

    assert _TABLE and all(o.fits_walker for o in _TABLE.values())
    o = _TABLE[(3, 12)]
    assert not replace(o, frame_instr=o.frame_instr + 4).fits_walker       # unaligned pointer
    assert not replace(o, co_firstlineno=200).fits_walker                   # outside the window
