"""Where CPython keeps what a profiler needs, per minor version (x86-64, default non-debug build).

3.13+ publish these offsets themselves in `_Py_DebugOffsets` at the start of `_PyRuntime`
(read by `from_debug_offsets`); older versions use the table below, measured against the
interpreters' own headers. The BPF walker receives the subset it needs (see `bpf_record`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import NamedTuple

from ...bpf.schema import PY_WINDOW

# FRAME_KIND_* tell the walker how to reach the current frame from a thread state.
FRAME_OBJECT = 0        # <= 3.10: tstate->frame is a PyFrameObject, one per eval call
FRAME_CFRAME = 1        # 3.11, 3.12: tstate->cframe->current_frame (_PyInterpreterFrame)
FRAME_DIRECT = 2        # 3.13+: tstate->current_frame

NONE = 0xFFFF           # "this field does not exist in this version"


@dataclass(frozen=True)
class PyOffsets:
    version: tuple[int, int]
    # runtime and thread states
    interpreters_head: int
    threads_head: int
    tstate_next: int = 8
    tstate_interp: int = 16
    tstate_frame: int = 24
    frame_kind: int = FRAME_OBJECT
    cframe_current: int = NONE
    thread_id: int = 176
    native_thread_id: int = NONE
    # frames
    frame_code: int = 32
    frame_previous: int = 24
    frame_instr: int = 96           # f_lasti (int) up to 3.10, else the instruction pointer
    frame_marker: int = NONE        # 3.11 is_entry; 3.12+ owner
    code_tag_mask: int = 0          # 3.14 stores f_executable as a tagged _PyStackRef
    # code objects
    co_argcount: int = 16
    co_flags: int = 36
    co_firstlineno: int = 40
    co_filename: int = 104
    co_name: int = 112
    co_qualname: int = NONE
    co_linetable: int = 120
    co_code_adaptive: int = NONE
    # strings and bytes
    ascii_data: int = 48            # sizeof(PyASCIIObject)
    compact_data: int = 72          # sizeof(PyCompactUnicodeObject)
    unicode_state: int = 32
    bytes_size: int = 16
    bytes_data: int = 32
    # Where these numbers come from: the interpreter's own _Py_DebugOffsets, or our table
    # (3.8-3.12, and the fallback for 3.13+ when the block is absent or unreadable).
    source: str = "table"

    @property
    def fits_walker(self) -> bool:
        """The BPF walker reads a frame's fields and a code object's each in one read of at most
        PY_WINDOW bytes and picks them out with aligned loads (bpf/python.h): every field it uses
        must lie in that window, 8-byte ones 8-aligned and 4-byte ones 4-aligned."""
        words = (self.frame_code, self.frame_previous, self.frame_instr)
        ints = (self.co_argcount, self.co_flags, self.co_firstlineno)
        return (all(o % 8 == 0 and o + 8 <= PY_WINDOW for o in words)
                and all(o % 4 == 0 and o + 4 <= PY_WINDOW for o in ints)
                and (self.frame_marker == NONE or self.frame_marker < PY_WINDOW))

    @property
    def lasti_in_bytes(self) -> bool:
        return self.version < (3, 10)

    @property
    def instr_is_pointer(self) -> bool:
        return self.version >= (3, 11)


_V38 = PyOffsets((3, 8), interpreters_head=32, threads_head=8, frame_instr=104)
_TABLE: dict[tuple[int, int], PyOffsets] = {
    (3, 8): _V38,
    (3, 9): replace(_V38, version=(3, 9)),
    (3, 10): replace(_V38, version=(3, 10), frame_instr=96),
    (3, 11): PyOffsets((3, 11), interpreters_head=40, threads_head=16, tstate_frame=56, frame_kind=FRAME_CFRAME,
                       cframe_current=8, thread_id=152, native_thread_id=160, frame_code=32, frame_previous=48,
                       frame_instr=56, frame_marker=68, co_argcount=56, co_flags=48, co_firstlineno=72,
                       co_filename=112, co_name=120, co_qualname=128, co_linetable=136, co_code_adaptive=184),
    (3, 12): PyOffsets((3, 12), interpreters_head=40, threads_head=72, tstate_frame=56, frame_kind=FRAME_CFRAME,
                       cframe_current=0, thread_id=136, native_thread_id=144, frame_code=0, frame_previous=8,
                       frame_instr=56, frame_marker=70, co_argcount=52, co_flags=48, co_firstlineno=68,
                       co_filename=112, co_name=120, co_qualname=128, co_linetable=136, co_code_adaptive=192,
                       ascii_data=40, compact_data=56),
    # 3.13 and 3.14 normally come from _Py_DebugOffsets; these are the fallbacks.
    (3, 13): PyOffsets((3, 13), interpreters_head=632, threads_head=7344, tstate_frame=72, frame_kind=FRAME_DIRECT,
                       thread_id=152, native_thread_id=160, frame_code=0, frame_previous=8, frame_instr=56,
                       frame_marker=70, co_argcount=52, co_flags=48, co_firstlineno=68, co_filename=112,
                       co_name=120, co_qualname=128, co_linetable=136, co_code_adaptive=200, ascii_data=40,
                       compact_data=56),
}
_TABLE[(3, 14)] = replace(_TABLE[(3, 13)], version=(3, 14), frame_marker=74, code_tag_mask=7, co_code_adaptive=208)

SUPPORTED = tuple(sorted(_TABLE))

# Frame owners (3.12+): a frame owned by the C stack is a shim pushed where C code entered the
# interpreter; from 3.14 the thread's base frame (owned by the interpreter) is one too.
OWNED_BY_CSTACK_312 = 3
SHIM_OWNER_MIN_314 = 3


def table_offsets(version: tuple[int, int]) -> PyOffsets | None:
    return _TABLE.get(version)


DEBUG_COOKIE = b"xdebugpy"
FROM_DEBUG_OFFSETS = "_Py_DebugOffsets"
DEBUG_WORDS = 128                 # u64 words read from the start of _PyRuntime (3.15 uses ~120)
DEBUG_SIZE = 8 * DEBUG_WORDS


class DebugLayout(NamedTuple):
    """Where the blocks of one version's `_Py_DebugOffsets` start, in u64 words (size words
    included): the lengths of the interpreter-state, thread-state (up to the frame block) and
    frame blocks, of the code-object block, and of the object blocks between it and the unicode
    block; the thread state's thread_id (native_thread_id follows it)."""

    interp: int
    tstate: int
    frame: int
    code: int
    objects: int
    thread_id: int = 5

    def starts(self) -> tuple[int, int, int, int, int]:
        """The word indexes of the interpreter-state, thread-state, frame, code and unicode blocks."""
        interp = 6                          # after cookie, version, free_threaded and the runtime block
        tstate = interp + self.interp
        frame = tstate + self.tstate
        code = frame + self.frame
        return interp, tstate, frame, code, code + self.code + self.objects


# Between the code and unicode blocks: PyObject 2, type object 4, tuple 3, list 3, dict 3, float 2,
# long 3, bytes 3 (bytes is last: its block is the 3 words before unicode's); 3.14 adds a set
# object (4), 3.15 four words of the type object.
_OBJECTS_313 = 2 + 4 + 3 + 3 + 3 + 2 + 3 + 3
# Per version, the layouts known: 3.13's; 3.14's release (the interpreter state gained
# code_object_generation and tlbc_generation, the frame tlbc_index, the code object co_tlbc);
# 3.14's pre-releases; 3.15's (the thread state has three words more after current_frame, base_frame
# the first, and four after status, and a block of one word, the exception stack item's, precedes
# the frame's: thread_id 176, native_thread_id 184 in Debian's 3.15.2).
_DEBUG_LAYOUTS = {
    (3, 13): (DebugLayout(13, 9, 6, 10, _OBJECTS_313),),
    (3, 14): (DebugLayout(16, 9, 8, 11, _OBJECTS_313 + 4), DebugLayout(14, 9, 7, 10, _OBJECTS_313 + 4)),
    (3, 15): (DebugLayout(16, 17, 8, 11, _OBJECTS_313 + 4 + 4, thread_id=8),),
}


def _debug_layout(u: tuple[int, ...], version: tuple[int, int]) -> DebugLayout | None:
    """The layout of this _Py_DebugOffsets: the one of its version's whose blocks read as their
    kinds must (the thread state's first offsets prev 0, next 8, interp 16 after its size, its
    native_thread_id 8 after its thread_id; sizes of a frame and a code object in their ranges; a
    compact string's fields where a PyASCIIObject has them), or None: a layout not known here."""
    for layout in _DEBUG_LAYOUTS.get(version, ()):
        _interp, tstate, frame, code, unicode_ = layout.starts()
        tid = tstate + layout.thread_id
        if unicode_ + 3 >= len(u):
            continue
        if (u[tstate] >= 200 and u[tstate + 1:tstate + 4] == (0, 8, 16) and u[tid + 1] == u[tid] + 8
                and 40 <= u[frame] <= 256 and 100 <= u[code] <= 512
                and 16 <= u[unicode_ + 1] <= 64 and 24 <= u[unicode_ + 3] <= 64):
            return layout
    return None


def free_threaded(blob: bytes) -> bool:
    """Whether this `_Py_DebugOffsets` is a free-threaded build's (its third word): its thread
    states, frames and code objects are laid out otherwise, and no table here reads them."""
    return len(blob) >= 24 and blob[:8] == DEBUG_COOKIE and struct.unpack_from("<Q", blob, 16)[0] != 0


def from_debug_offsets(blob: bytes) -> PyOffsets | None:
    """Offsets from the `_Py_DebugOffsets` block that starts `_PyRuntime` (3.13+), or None.

    The block is a sequence of u64: cookie, version, free_threaded, then per-struct blocks
    each starting with the struct's size, their lengths by version (_DEBUG_LAYOUTS, the one that
    reads right: _debug_layout); 3.14 also has a set-object block.
    """
    if len(blob) < DEBUG_SIZE or blob[:8] != DEBUG_COOKIE:
        return None
    u = struct.unpack_from(f"<{DEBUG_WORDS}Q", blob)
    hexversion = u[1]
    version = ((hexversion >> 24) & 0xFF, (hexversion >> 16) & 0xFF)
    if version < (3, 13) or u[2]:       # free-threaded builds keep frames elsewhere: not supported
        return None
    layout = _debug_layout(u, version)
    if layout is None:
        return None
    interp, tstate, frame, code, unicode_ = layout.starts()
    tid = tstate + layout.thread_id
    bytes_ = unicode_ - 3
    base = table_offsets(version) or replace(_TABLE[(3, 14)], version=version)
    return replace(
        base, source=FROM_DEBUG_OFFSETS,
        interpreters_head=u[5], threads_head=u[interp + 3],
        tstate_next=u[tstate + 2], tstate_interp=u[tstate + 3], tstate_frame=u[tstate + 4],
        thread_id=u[tid], native_thread_id=u[tid + 1],
        frame_previous=u[frame + 1], frame_code=u[frame + 2], frame_instr=u[frame + 3], frame_marker=u[frame + 5],
        co_filename=u[code + 1], co_name=u[code + 2], co_qualname=u[code + 3], co_linetable=u[code + 4],
        co_firstlineno=u[code + 5], co_argcount=u[code + 6], co_code_adaptive=u[code + 9],
        bytes_size=u[bytes_ + 1], bytes_data=u[bytes_ + 2],
        unicode_state=u[unicode_ + 1], ascii_data=u[unicode_ + 3], compact_data=u[unicode_ + 3] + 16)
