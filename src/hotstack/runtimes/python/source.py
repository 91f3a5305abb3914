"""CPythonSource: the CPython frame source (runtimes/registry.py), its first implementation.

It detects CPython processes (detect.py: memory and ELF reads only), lists them for the kernel
walker (bpf/python.h) through the RuntimeKernel the engine gives it, reads code objects early
(every ~100 ms, so short-lived processes keep their names), and merges the recorded frames
into native stacks (merge.py). The record layouts come from bpf/schema.py.
"""

from __future__ import annotations

from itertools import repeat

from ... import procs
from ...bpf import schema
from ..common.recorded_stack import stack_records
from ...profile.model import Frame
from .code import CodeCache
from .detect import PythonProcess, detect
from .frames import RawPyFrame, split_groups
from ..common.interpreter_source import InterpreterSource
from ..common.merge import anchor_test, is_eval_frame, merge
from ..common.files import runs
from .offsets import FRAME_CFRAME, NONE


def copy_layout(o) -> dict[str, int]:
    """What the walker copies of a code object (py_proc's snap_* fields): its bytes up to the last
    field read_code reads, and the offsets of its name, file name and line table pointers; a code
    length of 0 (no copies) where a field lies past what a copy holds or a pointer is not 8-aligned."""
    name = o.co_qualname if o.co_qualname != NONE else o.co_name
    pointers = (name, o.co_filename, o.co_linetable)
    end = max(max(pointers) + 8, o.co_argcount + 4, o.co_flags + 4, o.co_firstlineno + 4)
    fits = end <= schema.PY_SNAP_CODE and all(p % 8 == 0 for p in pointers)
    return dict(snap_code_len=end if fits else 0, co_name=name, co_filename=o.co_filename,
                co_linetable=o.co_linetable)


def proc_record(proc: PythonProcess) -> bytes:
    o = proc.offsets
    return schema.PY_PROC.pack(**copy_layout(o),
        threads_head=proc.threads_head, interp_ptr=proc.interp_ptr, threads_head_off=o.threads_head,
        code_tag_mask=o.code_tag_mask, thread_id=o.thread_id,
        tstate_next=o.tstate_next, tstate_frame=o.tstate_frame,
        cframe_current=o.cframe_current if o.frame_kind == FRAME_CFRAME else NONE, frame_code=o.frame_code,
        frame_previous=o.frame_previous, frame_instr=o.frame_instr, frame_marker=o.frame_marker,
        co_argcount=o.co_argcount, co_flags=o.co_flags, co_firstlineno=o.co_firstlineno,
        eval_start=proc.eval_loop[0], eval_end=proc.eval_loop[1],
        eval_part_start=proc.eval_part[0], eval_part_end=proc.eval_part[1])


# parse_stack makes RawPyFrames straight from the record's fields, in their order
assert RawPyFrame._fields == schema.PY_FRAME.fields, (RawPyFrame._fields, schema.PY_FRAME.fields)


def parse_stack(raw: bytes) -> tuple[list[RawPyFrame], bool, int]:
    """(frames leaf first, truncated, first pid) of a struct py_stack."""
    head, fields = stack_records(raw, schema.PY_STACK, schema.PY_FRAME, schema.PY_MAX_FRAMES,
                                 schema.PY_STACK_TAIL_OFFSET)
    # tuple.__new__ is what RawPyFrame._make calls, mapped here at C level: _make is a Python-level call
    # a frame (a third of a naming pass's time on a deep recursion)
    frames = list(map(tuple.__new__, repeat(RawPyFrame), fields))
    return frames, bool(head.truncated), head.pid


class CPythonSource(InterpreterSource):
    """Thread-safe: observe() and poll() run on the engine's pid watcher thread."""

    name = "python"
    label = "CPython"
    looks_for = ("python",)       # (detect's first test: a file of that name mapped executable)

    def __init__(self) -> None:
        super().__init__()
        self._procs: dict[int, tuple[PythonProcess, procs.ProcessInfo | None]] = {}
        self.codes = CodeCache()
        # (pid, key) -> (the process's entry, named groups, every frame named): the samples of one
        # Python stack under other native leaves (a few to tens an interval) are named once, not once
        # each. Groups whose every frame was named are kept for the next interval too (a key is a
        # hash of the frames' code objects and instructions, and the cache checks the object it
        # names): a recurring Python stack under a new native leaf is not named again.
        self._named: dict[tuple[int, int], tuple] = {}
        self._named_before: dict[tuple[int, int], tuple] = {}

    def _find(self, process: procs.Process) -> PythonProcess | None:
        return detect(process)

    def _may_run(self, process: procs.Process) -> bool:
        return "python" in process.exec_paths(recent=True) or runs(process, "python")   # as detect's first test

    def _is_provisional(self, found: PythonProcess) -> bool:
        return found.provisional

    def _record(self, proc: PythonProcess) -> bytes:
        return proc_record(proc)

    def _parse(self, raw: bytes) -> tuple[list[RawPyFrame], bool, int]:
        return parse_stack(raw)

    def _take_copies(self) -> None:
        """The code objects the walker copied since the last call, kept for naming (the pid
        watcher's rounds and the engine's drain both call it)."""
        if self._kernel is None:
            return
        raw = self._kernel.snapshots()
        if raw:
            def offsets_of(pid: int):
                entry = self._procs.get(pid)
                return entry[0].offsets if entry is not None else None
            self.codes.add_copies(offsets_of, [schema.PY_CODE_SNAP.unpack(r) for r in raw])

    def poll(self, active_buffer: int) -> None:
        self._take_copies()
        super().poll(active_buffer)

    def collect(self, buffer: int) -> None:
        self._take_copies()
        super().collect(buffer)
        self._named_before = {k: v for k, v in self._named.items() if v[2]}
        self._named = {}

    def _name_early(self, pid: int, entry, frames: list[RawPyFrame]) -> None:
        self.codes.frames(entry[0].memory, entry[0].offsets, list(set(frames)))   # (a recursion's frames repeat)

    def frames(self, pid: int, key: int) -> tuple[list[list[Frame]], bool]:
        """(leaf-first groups of symbolized Python frames, one per evaluation-loop call; truncated)."""
        return self._frames(pid, key)[:2]

    def _frames(self, pid: int, key: int) -> tuple[list[list[Frame]], bool, bool]:
        """frames(), and whether every frame in them is named."""
        raw = self._stack(key)
        entry = self._procs.get(pid)
        if not raw or entry is None:
            return [], False, True
        proc = entry[0]
        named = self._named.get((pid, key))
        if named is None or named[0] is not proc:
            named = self._named_before.get((pid, key))
            if named is None or named[0] is not proc:     # (an exec makes a new entry)
                o = proc.offsets
                misses = self.codes.misses     # (an unnamed frame is made, never cached, each time)
                groups = split_groups(o, raw[0], self.codes.frames(proc.memory, o, raw[0]), proc.none)
                named = (proc, groups, self.codes.misses == misses)
            self._named[(pid, key)] = named
        return named[1], raw[1], named[2]

    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]:
        return self.final_merge(pid, key, native)[0]

    def final_merge(self, pid: int, key: int, native: list[Frame]) -> tuple[list[Frame], bool]:
        """(merge(), whether every Python frame in it is named as it will stay). merge() depends
        only on (pid, key, native frames): sampling/samples.py reuses a final merged stack while
        the process and its stacks are the same."""
        if not key:
            return native, True
        groups, truncated, named = self._frames(pid, key)
        if not groups:
            return native, True
        return merge(native, groups, truncated, self._anchor(pid)), named

    def _anchor(self, pid: int):
        """The evaluation loop's frames of this process: by name, and in a stripped interpreter
        whose compiler split the loop, its parts by address (detect.split_parts)."""
        entry = self._procs.get(pid)
        binary = entry[0].binary if entry is not None else None
        if binary is None or not binary.eval_parts:
            return is_eval_frame
        start, size = binary.eval_loop
        return anchor_test(is_eval_frame, entry[0].file_name, ((start, start + size),) + binary.eval_parts)

    def counters(self) -> list[int]:
        """The walker's counter deltas (enum py_stat order)."""
        if self._kernel is None:
            return [0] * schema.PY_STAT_MAX
        return self._kernel.counters()

    def _forget_state(self, pid: int, entry) -> None:
        self._release_known_stacks(pid)
        self.codes.forget(pid)

    def forget_dead(self) -> None:
        self._prune_known()         # (the stacks of processes forgotten before the last collect)
        super().forget_dead()


__all__ = ["CPythonSource", "parse_stack", "proc_record"]
