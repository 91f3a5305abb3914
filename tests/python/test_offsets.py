"""_Py_DebugOffsets parsing: the 3.13 layout against a real 3.13 where present, the 3.14 and 3.15
layouts against Debian unstable's CPython 3.14 and 3.15."""

from __future__ import annotations

import struct

import pytest

from hotstack.runtimes.python.detect import inspect_binary
from hotstack.runtimes.python.offsets import DEBUG_SIZE, DEBUG_WORDS, FROM_DEBUG_OFFSETS, from_debug_offsets, table_offsets
from pyframes_helpers import INTERPRETERS

def _debug_block(path) -> bytes:
    from hotstack.runtimes.common.files import symbol_spans
    from hotstack.symbols.elf import ElfFile
    with ElfFile(str(path)) as elf:
        runtime = symbol_spans(elf, (b"_PyRuntime",))[b"_PyRuntime"][0]
        return elf.read(elf.vaddr_to_file_offset(runtime), DEBUG_SIZE)


def _fields(o) -> tuple:
    """The offsets the walker and the naming read: of the runtime and thread states, of a frame, of
    a code object, of strings (and the tag bits of a frame's code pointer)."""
    return ((o.interpreters_head, o.threads_head, o.tstate_next, o.tstate_interp, o.tstate_frame, o.thread_id,
             o.native_thread_id),
            (o.frame_previous, o.frame_code, o.frame_instr, o.frame_marker),
            (o.co_filename, o.co_name, o.co_qualname, o.co_linetable, o.co_firstlineno, o.co_argcount,
             o.co_code_adaptive),
            (o.bytes_size, o.bytes_data, o.unicode_state, o.ascii_data, o.code_tag_mask))


# Debian unstable's CPython 3.14, as its headers put them
FRAME_314 = (8, 0, 56, 74)
CODE_314 = (112, 120, 128, 136, 68, 52, 208)
STRINGS_314 = (16, 32, 32, 40, 7)


def test_314_layout():
    """Debian unstable's CPython 3.14.0 (a root filesystem of .ci/install.d/rootfs.sh): its
    _Py_DebugOffsets in the released layout (the interpreter state's code_object_generation and
    tlbc_generation, the frame's tlbc_index, the code object's co_tlbc), each field as its header
    puts it; a block of the pre-release layout, whose fields stand a word earlier, is read too."""
    from tests.runtimes.matrix import extracted
    blob = _debug_block(extracted("sid") / "usr/bin/python3.14")
    o = from_debug_offsets(blob)
    assert o is not None and o.version == (3, 14)
    assert _fields(o) == ((808, 7344, 8, 16, 72, 152, 160), FRAME_314, CODE_314, STRINGS_314)
    assert o.fits_walker
    assert o.source == FROM_DEBUG_OFFSETS and table_offsets((3, 14)).source == "table"
    # the pre-release layout: two interpreter-state words, one frame word and one code word fewer
    words = list(struct.unpack(f"<{DEBUG_WORDS}Q", blob))
    pre = words[:20] + words[22:22 + 9 + 7] + words[22 + 9 + 8:22 + 9 + 8 + 10] + words[22 + 9 + 8 + 11:]
    pre += [0] * (DEBUG_WORDS - len(pre))
    old = from_debug_offsets(struct.pack(f"<{DEBUG_WORDS}Q", *pre))
    assert old is not None and (old.threads_head, old.tstate_frame, old.frame_instr, old.co_qualname) == (
        7344, 72, 56, 128)


def test_315_layout():
    """Debian unstable's CPython 3.15 (python3.15 of a root filesystem of .ci/install.d/rootfs.sh):
    its _Py_DebugOffsets has a longer thread-state block (thread_id and native_thread_id 24 bytes
    further, three words later in the block, and a one-word block before the frame's) and a longer
    type-object block before the strings'; every field as the shipped interpreter has it (its
    thread_id and native_thread_id checked against a running python3.15's threads), and no layout
    of another version taken for it."""
    from tests.runtimes.matrix import extracted
    path = extracted("sid") / "usr/bin/python3.15"
    blob = _debug_block(path)
    o = from_debug_offsets(blob)
    assert o is not None and o.version == (3, 15), "3.15's _Py_DebugOffsets not read"
    # its frames, code objects and strings as 3.14's
    assert _fields(o) == ((936, 7336, 8, 16, 72, 176, 184), FRAME_314, CODE_314, STRINGS_314)
    assert o.fits_walker and o.source == FROM_DEBUG_OFFSETS
    binary = inspect_binary(str(path))
    assert binary is not None and binary.offsets == o
    # the same words under 3.14's version are no 3.14 layout: its thread-state block is shorter
    words = list(struct.unpack(f"<{DEBUG_WORDS}Q", blob))
    words[1] = (words[1] & ~0xFF0000) | (14 << 16)
    assert from_debug_offsets(struct.pack(f"<{DEBUG_WORDS}Q", *words)) is None


@pytest.mark.parametrize("version", ["3.14", "3.15"])
def test_a_free_threaded_build_is_said_not_read(tmp_path, version):
    """A free-threaded build (the third word of its _Py_DebugOffsets set: here Debian's interpreter
    with that word set in a copy) lays its thread states and frames out otherwise: refused with its
    reason, never read with the default build's table."""
    from hotstack.runtimes.common.files import Unreadable, symbol_spans
    from hotstack.symbols.elf import ElfFile
    from tests.runtimes.matrix import extracted
    path = extracted("sid") / f"usr/bin/python{version}"
    with ElfFile(str(path)) as elf:
        at = elf.vaddr_to_file_offset(symbol_spans(elf, (b"_PyRuntime",))[b"_PyRuntime"][0])
    data = bytearray(path.read_bytes())
    assert data[at:at + 8] == b"xdebugpy" and data[at + 16:at + 24] == bytes(8)
    data[at + 16] = 1
    copy = tmp_path / f"python{version}"
    copy.write_bytes(bytes(data))
    with pytest.raises(Unreadable, match="free-threaded"):
        inspect_binary(str(copy))


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
