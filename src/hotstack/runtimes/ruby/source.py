"""RubySource: the Ruby frame source (runtimes/registry.py).

It detects Ruby processes (detect.py: memory and ELF reads only) and lists them for the kernel
walker (bpf/ruby.h) through the RuntimeKernel the engine gives it. It names recorded frames early
(every ~100 ms, so short-lived processes keep their names) and merges them into native stacks:
each `rb_vm_exec` native frame is replaced by the Ruby frames that VM entry ran (frames.py),
the way CPython's evaluation-loop frames are (python/merge.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ... import procs
from ...bpf import schema
from ..common.recorded_stack import stack_records
from ...profile.model import Frame, FrameKind
from ..common.memory import MemoryReadError, Process
from ..common.interpreter_source import InterpreterSource
from ..common.merge import anchor_test, merge
from ..common.walker_totals import WalkerTotals
from .classes import ClassNames
from .detect import RubyProcess, detect
from .frames import FRAME_METHOD, RawRubyFrame, vm_groups
from .iseq import IMEMO_MENT, IseqCache, IseqInfo, imemo_type
from ..common.jit import JitWatch, merge_jit
from .symbols import find_table, method_name, table_candidates


VM_ENTRY = "rb_vm_exec"
JIT_MARKER = Frame("[ruby jit]", FrameKind.JIT, resolved=False)


def is_vm_entry(frame: Frame) -> bool:
    return frame.name == VM_ENTRY


def vm_entry_test(proc: RubyProcess) -> Callable[[Frame], bool]:
    """What tells a VM entry frame of this process: rb_vm_exec by name, and where a stripped
    library names it not (Debian 13's 3.3), a frame in the function found for it
    (detect._vm_exec_range)."""
    lo, hi = proc.binary.vm_exec
    return anchor_test(is_vm_entry, proc.file_name, ((lo, hi),) if hi else ())


def parse_stack(raw: bytes) -> tuple[list[RawRubyFrame], bool, int]:
    """(frames leaf first, truncated, first pid) of a struct rb_stack."""
    head, records = stack_records(raw, schema.RB_STACK, schema.RB_FRAME, schema.RB_MAX_FRAMES,
                                  schema.RB_STACK_TAIL_OFFSET)
    return [RawRubyFrame(*r) for r in records], bool(head.truncated), head.pid


def _defined_name(mem: Process, o, table, me: int) -> str | None:
    """The name a method entry's definition was given (its original ID, not an alias's)."""
    definition = mem.u64(me + o.me_def)
    return method_name(mem, o, table, o.last_op_id, mem.u64(definition + o.def_original_id))


class _Process:
    def __init__(self, proc: RubyProcess, process: procs.ProcessInfo | None) -> None:
        self.proc = proc
        self.process = process
        self.cfuncs: dict[int, str | None] = {}
        self.methods: dict[tuple[int, int], str | None] = {}    # (me, iseq) -> "Class#" / "Class." / None
        self.iseq_prefix: dict[int, str] = {}                    # a method's iseq -> its class prefix
        self._table: int | None = None
        self._classes: ClassNames | None = None
        self.jit = JitWatch(proc.memory, proc.jit)
        self._candidates = table_candidates(proc.binary.path, proc.binary.all_symbols)

    def symbol_table(self, mem: Process) -> int:
        if self._table is None:
            self._table = find_table(mem, self.proc.base, self._candidates)
        return self._table

    def classes(self, mem: Process) -> ClassNames | None:
        if self._classes is None:
            table = self.symbol_table(mem)
            if table:
                self._classes = ClassNames(self.proc.offsets, table)
        return self._classes


class RubySource(InterpreterSource):
    """Thread-safe: observe() and poll() run on the engine's pid watcher thread."""

    name = "ruby"
    label = "Ruby"
    looks_for = ("ruby",)         # (detect: ruby* executables only)
    proc_record = schema.RB_PROC

    def __init__(self) -> None:
        super().__init__()
        self._procs: dict[int, _Process] = {}
        self.iseqs = IseqCache()
        self._kernel_totals = WalkerTotals(schema.RB_STAT_MAX)
        self.jit_stacks = 0         # samples merged through JIT code (runtimes/common/jit.py)

    def _find(self, process: procs.Process) -> RubyProcess | None:
        return detect(process)

    def _entry(self, proc: RubyProcess, process: procs.ProcessInfo | None) -> _Process:
        return _Process(proc, process)

    def _parse(self, raw: bytes) -> tuple[list[RawRubyFrame], bool, int]:
        return parse_stack(raw)

    def _name_early(self, pid: int, entry: _Process, frames: list[RawRubyFrame]) -> None:
        self._methods_first(pid, entry, frames)
        for f in frames:
            if f.shown:
                self._frame(pid, entry, f)

    def _cfunc_name(self, pid: int, entry: _Process, me: int) -> str | None:
        if me in entry.cfuncs:
            return entry.cfuncs[me]
        o = entry.proc.offsets
        mem = entry.proc.memory
        name = None
        try:
            if imemo_type(mem.u64(me)) == IMEMO_MENT:
                table = entry.symbol_table(mem)
                if table:
                    name = _defined_name(mem, o, table, me)
                    classes = entry.classes(mem)
                    prefix = classes.prefix(mem, mem.u64(me + o.me_owner)) if classes else None
                    name = f"{prefix}{name}" if prefix else name
        except (MemoryReadError, struct.error, IndexError):
            name = None
        if len(entry.cfuncs) > 50_000:
            entry.cfuncs.clear()
        entry.cfuncs[me] = name
        return name

    def _frame(self, pid: int, entry: _Process, f: RawRubyFrame) -> Frame:
        if f.is_cfunc:
            name = self._cfunc_name(pid, entry, f.me)
            if name is None:
                self.iseqs.misses += 1
                return Frame("[unknown ruby C function]", FrameKind.RUBY, resolved=False)
            return Frame(name, FrameKind.RUBY)
        o = entry.proc.offsets
        info = self.iseqs.iseq(entry.proc.memory, o, f.iseq, f.pc)
        if info is None:
            self.iseqs.misses += 1
            return Frame("[unknown ruby]", FrameKind.RUBY, resolved=False)
        return Frame(self._label(pid, entry, f, info), FrameKind.RUBY, file=info.path,
                     line=self.iseqs.line(entry.proc.memory, o, info, f.pc))

    def _method_prefix(self, pid: int, entry: _Process, f: RawRubyFrame, info: IseqInfo) -> str | None:
        """The class prefix of a method frame, from its method entry (ep[-2]); the entry must name
        the method the iseq is (its definition's original ID is the iseq's label), else None."""
        key = (f.me, f.iseq)
        if key in entry.methods:
            return entry.methods[key]
        o = entry.proc.offsets
        mem = entry.proc.memory
        prefix = None
        try:
            classes = entry.classes(mem)
            if classes is not None and f.me and imemo_type(mem.u64(f.me)) == IMEMO_MENT:
                if _defined_name(mem, o, classes.table, f.me) == info.label:
                    prefix = classes.prefix(mem, mem.u64(f.me + o.me_owner))
        except (MemoryReadError, struct.error, IndexError):
            prefix = None
        if len(entry.methods) > 50_000:
            entry.methods.clear()
            entry.iseq_prefix.clear()
        entry.methods[key] = prefix
        if prefix:
            entry.iseq_prefix[f.iseq] = prefix
        return prefix

    def _label(self, pid: int, entry: _Process, f: RawRubyFrame, info: IseqInfo) -> str:
        """`Class#method` / `Class.method` for a method frame; `block in Class#method` for a block
        (rescue, ensure) of a method whose class is known: the label of its local iseq's method
        frame, met in this or an earlier stack of the process."""
        if f.magic == FRAME_METHOD:
            prefix = self._method_prefix(pid, entry, f, info)
            return f"{prefix}{info.label}" if prefix else info.label
        prefix = entry.iseq_prefix.get(info.local_iseq) if info.local_iseq != f.iseq else None
        head, sep, method = info.label.rpartition(" in ")
        if prefix and sep and method and " " not in method:
            return f"{head} in {prefix}{method}"
        return info.label

    def frames(self, pid: int, key: int) -> tuple[list[list[Frame]], bool]:
        """(leaf-first groups of named Ruby frames, one per VM entry; truncated)."""
        raw = self._stacks.get(key)
        entry = self._procs.get(pid)
        if not raw or entry is None:
            return [], False
        self._methods_first(pid, entry, raw[0])
        groups = [[self._frame(pid, entry, f) for f in group] for group in vm_groups(raw[0])]
        return groups, raw[1]

    def _methods_first(self, pid: int, entry: _Process, frames: list[RawRubyFrame]) -> None:
        """Method frames' classes before the blocks above them are named (frames are leaf first)."""
        for f in reversed(frames):
            if f.magic == FRAME_METHOD and f.runs_iseq and (f.me, f.iseq) not in entry.methods:
                info = self.iseqs.iseq(entry.proc.memory, entry.proc.offsets, f.iseq, f.pc)
                if info is not None:
                    self._method_prefix(pid, entry, f, info)

    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]:
        if not key:
            return native
        groups, truncated = self.frames(pid, key)
        if not groups:
            return native
        entry = self._procs.get(pid)
        regions = entry.jit.regions_for(native) if entry is not None else ()
        if regions:
            merged = merge_jit(native, groups, truncated, regions, JIT_MARKER)
            if merged is not None:
                self.jit_stacks += 1
                return merged
        return merge(native, groups, truncated, is_anchor=vm_entry_test(entry.proc) if entry is not None else is_vm_entry)

    def counters(self) -> list[int]:
        if self._kernel is None:
            return [0] * schema.RB_STAT_MAX
        return self._kernel.counters()

    def stats(self) -> dict[str, int]:
        """For the agent's debug info and /metrics: processes listed now; since the start, the kernel
        walker's counters (rb_stat) and the frames named or left unknown."""
        t = self._kernel_totals.update(self._kernel)
        return {"processes": len(self._procs), "walks": t[schema.RB_STAT_WALKS], "no_ec": t[schema.RB_STAT_NO_EC],
                "truncated": t[schema.RB_STAT_TRUNCATED], "stacks_full": t[schema.RB_STAT_STACKS_FULL],
                "iseqs_read": self.iseqs.reads, "unknown": self.iseqs.misses, "jit_stacks": self.jit_stacks}

    def _entry_process(self, entry: _Process) -> procs.ProcessInfo | None:
        return entry.process

    def _forget_state(self, pid: int, entry) -> None:
        self.iseqs.forget(pid)


__all__ = ["RubySource", "parse_stack"]
