"""The raw Python frame chain of a thread, and how it splits into evaluation-loop calls.

The BPF walker (bpf/python.h) records, per frame, (code object, instruction, marker byte,
checksum), leaf first. `walk_thread` does the same walk from userspace over the process's memory reads (procs.Process):
tests use it to check the offsets against live interpreters, and it documents the walk.
`eval_groups` splits a chain into the frames that each C-level call of the evaluation loop runs,
which is what replaces each `_PyEval_EvalFrameDefault` frame of the native stack.
"""

from __future__ import annotations

from itertools import compress
from operator import itemgetter
from typing import NamedTuple, TypeVar

from .code import checksum
from .detect import PythonProcess
from ... import procs
from ..common.memory import MemoryReadError
from .offsets import FRAME_CFRAME, NONE, OWNED_BY_CSTACK_312, SHIM_OWNER_MIN_314, PyOffsets

MAX_FRAMES = 96          # frames walked per sample, in BPF and here
MAX_THREADS = 64         # thread states searched per sample


class RawPyFrame(NamedTuple):
    """One recorded frame. A tuple in struct py_frame's field order (bpf/schema.yaml), so that a
    recorded stack is made with one struct.iter_unpack: 40 -> 12 us for a 62-frame stack, parsed
    for every stack a naming pass takes (a frozen dataclass's __init__ was most of that)."""

    code: int
    instr: int           # instruction pointer (3.11+) or f_lasti (<= 3.10)
    checksum: int
    marker: int          # is_entry (3.11) or owner (3.12+), else 0


def find_tstate(mem: procs.Process, proc: PythonProcess, thread_id: int) -> int:
    o = proc.offsets
    tstate = mem.u64(proc.threads_head)
    for _ in range(MAX_THREADS):
        if tstate == 0:
            break
        if mem.u64(tstate + o.thread_id) == thread_id:
            return tstate
        tstate = mem.u64(tstate + o.tstate_next)
    return 0


def current_frame(mem: procs.Process, o: PyOffsets, tstate: int) -> int:
    frame = mem.u64(tstate + o.tstate_frame)
    if o.frame_kind == FRAME_CFRAME and frame:
        frame = mem.u64(frame + o.cframe_current)
    return frame


def walk_frames(mem: procs.Process, o: PyOffsets, frame: int) -> list[RawPyFrame]:
    """Leaf-first frames from `frame`; a read that fails ends the chain (truncated, not an error)."""
    out: list[RawPyFrame] = []
    try:
        for _ in range(MAX_FRAMES):
            if frame == 0:
                break
            code = mem.u64(frame + o.frame_code) & ~o.code_tag_mask
            instr = mem.u64(frame + o.frame_instr)
            marker = mem.u8(frame + o.frame_marker) if o.frame_marker != NONE else 0
            try:
                sum_ = checksum(mem.u32(code + o.co_argcount), mem.u32(code + o.co_flags),
                                mem.u32(code + o.co_firstlineno))
            except MemoryReadError:
                sum_ = 0
            out.append(RawPyFrame(code=code, instr=instr, checksum=sum_, marker=marker))
            frame = mem.u64(frame + o.frame_previous)
    except MemoryReadError:
        pass
    return out


def walk_thread(proc: PythonProcess, thread_id: int) -> list[RawPyFrame]:
    """The frames of the thread whose `thread_id` (pthread_self) is given, leaf first."""
    mem = proc.memory
    try:
        tstate = find_tstate(mem, proc, thread_id)
        return walk_frames(mem, proc.offsets, current_frame(mem, proc.offsets, tstate)) if tstate else []
    except MemoryReadError:
        return []


def is_boundary(o: PyOffsets, frame: RawPyFrame, none: int) -> tuple[bool, bool]:
    """(is a real frame, ends an evaluation-loop call) for one raw frame."""
    if o.version <= (3, 10):
        return True, True
    if o.version == (3, 11):
        return True, bool(frame.marker)
    shim_min = SHIM_OWNER_MIN_314 if o.version >= (3, 14) else OWNED_BY_CSTACK_312
    if frame.marker >= shim_min or frame.code == none or frame.code == 0:
        return False, True
    return True, False


def eval_groups(o: PyOffsets, frames: list[RawPyFrame], none: int) -> list[list[RawPyFrame]]:
    """Leaf-first groups of leaf-first frames, one group per call of the evaluation loop."""
    groups: list[list[RawPyFrame]] = []
    current: list[RawPyFrame] = []
    for f in frames:
        real, ends = is_boundary(o, f, none)
        if real:
            current.append(f)
        if ends and current:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


_MARKER = itemgetter(3)      # RawPyFrame.marker
T = TypeVar("T")


def split_groups(o: PyOffsets, frames: list[RawPyFrame], named: list[T], none: int) -> list[list[T]]:
    """eval_groups() of `frames`, made of `named` (one item per frame, in the same order):
    [[named[frames.index(f)] for f in group] for group in eval_groups(o, frames, none)], in
    C-level passes and slices where the version allows (3.11: every frame is real and its marker
    ends a call), not a Python call per frame."""
    if o.version <= (3, 10):
        return [[item] for item in named]
    if o.version == (3, 11):
        kept = named
        ends = [i + 1 for i in compress(range(len(frames)), map(_MARKER, frames))]
    else:
        shim_min = SHIM_OWNER_MIN_314 if o.version >= (3, 14) else OWNED_BY_CSTACK_312
        real = [not (f.marker >= shim_min or f.code == none or f.code == 0) for f in frames]
        kept = list(compress(named, real))
        ends = []
        count = 0       # real frames so far: a frame that is not real ends the group before it
        for is_real in real:
            if is_real:
                count += 1
            else:
                ends.append(count)
    groups = []
    start = 0
    for end in ends:
        if end > start:
            groups.append(kept[start:end])
            start = end
    if start < len(kept):
        groups.append(kept[start:])
    return groups
