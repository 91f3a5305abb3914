"""PhpSource: the PHP frame source (unwind/runtimes.py), on the model of RubySource.

Frames are named from the target's memory: a user function `Class::method` or `function` (or
`{main}` for a script's top level) with its file and the line of the frame's opline; an internal
function by its name. Names are cached per (process, zend_function); a function whose name no
longer reads as a string (freed) gives `[unknown php]`. Each `execute_ex` native frame is replaced
by the frames that call of the VM ran: walking leaf first, a group ends after a ZEND_CALL_TOP frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ... import procs
from ...bpf import schema
from ...profile.model import Frame, FrameKind
from ..python.memory import MemoryReadError, ProcessMemory
from ..interpreter_source import InterpreterSource
from ..python.merge import merge
from .detect import PhpOffsets, PhpProcess, detect


VM_ENTRY = "execute_ex"
CALL_TOP = 1 << 17
USER_FUNCTION, INTERNAL_FUNCTION = 2, 1
IS_STRING = 6
MAX_STRING = 1024
MAX_FUNCS_PER_PROCESS = 50_000


@dataclass(frozen=True, slots=True)
class RawPhpFrame:
    func: int
    opline: int
    call_info: int


@dataclass(frozen=True)
class FuncInfo:
    name: str
    file: str
    user: bool


def parse_stack(raw: bytes) -> tuple[list[RawPhpFrame], bool, int]:
    head = schema.PHP_STACK.unpack(raw)
    size = schema.PHP_FRAME.size
    n = min(head.len, schema.PHP_MAX_FRAMES, (len(raw) - schema.PHP_STACK_TAIL_OFFSET) // size)
    unpack = schema.PHP_FRAME.struct.unpack_from
    return ([RawPhpFrame(*unpack(raw, schema.PHP_STACK_TAIL_OFFSET + i * size)) for i in range(n)],
            bool(head.truncated), head.pid)


def vm_groups(frames: list[RawPhpFrame]) -> list[list[RawPhpFrame]]:
    groups, current = [], []
    for f in frames:
        if f.func:
            current.append(f)
        if f.call_info & CALL_TOP and current:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def read_zstring(mem: ProcessMemory, o: PhpOffsets, address: int) -> str:
    head = mem.read(address, o.str_val)
    if head[4] & 0x0F != IS_STRING:      # gc.u.type_info: the type in its low 4 bits
        raise MemoryReadError(f"{address:#x} is not a string")
    length = struct.unpack_from("<Q", head, o.str_len)[0]
    return mem.read(address + o.str_val, min(length, MAX_STRING)).decode("utf-8", "replace")


def read_func(mem: ProcessMemory, o: PhpOffsets, func: int) -> FuncInfo:
    kind = mem.u8(func + o.fn_type)
    if kind not in (USER_FUNCTION, INTERNAL_FUNCTION):
        raise MemoryReadError(f"{func:#x} is not a function")
    name_ptr = mem.u64(func + o.fn_name)
    name = read_zstring(mem, o, name_ptr) if name_ptr else "{main}"
    scope = mem.u64(func + o.fn_scope)
    if scope and name_ptr:
        name = f"{read_zstring(mem, o, mem.u64(scope + o.ce_name))}::{name}"
    file = read_zstring(mem, o, mem.u64(func + o.op_filename)) if kind == USER_FUNCTION else ""
    return FuncInfo(name, file, kind == USER_FUNCTION)


class PhpSource(InterpreterSource):
    name = "php"

    def __init__(self) -> None:
        super().__init__()
        self._procs: dict[int, tuple[PhpProcess, procs.Process | None]] = {}
        self._funcs: dict[int, dict[int, FuncInfo | None]] = {}
        self._lines: dict[int, dict[int, int]] = {}
        self._totals = [0] * schema.PHP_STAT_MAX
        self.reads = self.misses = 0

    def prepare(self) -> bool:
        return True

    def _tunable(self) -> int:
        return 1

    def _find(self, pid: int) -> PhpProcess | None:
        return detect(pid)

    def _record(self, proc: PhpProcess) -> bytes:
        o = proc.offsets
        return schema.PHP_PROC.pack(current_execute_data=proc.executor_globals + o.current_execute_data,
                                    ed_func=o.ed_func, ed_call_info=o.ed_call_info, ed_prev=o.ed_prev)

    def _parse(self, raw: bytes) -> tuple[list[RawPhpFrame], bool, int]:
        return parse_stack(raw)

    def _name_early(self, pid: int, entry, frames: list[RawPhpFrame]) -> None:
        for f in frames:
            if f.func:
                self._frame(pid, entry[0].offsets, f)

    def _frame(self, pid: int, o: PhpOffsets, f: RawPhpFrame) -> Frame:
        funcs = self._funcs.setdefault(pid, {})
        info = funcs.get(f.func, False)
        mem = ProcessMemory(pid)
        if info is False:
            self.reads += 1
            try:
                info = read_func(mem, o, f.func)
            except (MemoryReadError, struct.error, IndexError):
                info = None
            if len(funcs) >= MAX_FUNCS_PER_PROCESS:
                funcs.clear()
            if info is not None:
                funcs[f.func] = info
        if info is None:
            self.misses += 1
            return Frame("[unknown php]", FrameKind.PHP, resolved=False)
        if not info.user:
            return Frame(info.name, FrameKind.PHP)
        lines = self._lines.setdefault(pid, {})
        line = lines.get(f.opline)
        if line is None:
            try:
                line = mem.u32(f.opline + o.op_lineno) if f.opline else 0
            except MemoryReadError:
                line = 0
            if len(lines) >= MAX_FUNCS_PER_PROCESS:
                lines.clear()
            lines[f.opline] = line
        return Frame(info.name, FrameKind.PHP, file=info.file, line=line)

    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]:
        raw = self._stacks.get(key) if key else None
        entry = self._procs.get(pid)
        if not raw or entry is None:
            return native
        o = entry[0].offsets
        groups = [[self._frame(pid, o, f) for f in g] for g in vm_groups(raw[0])]
        if not groups:
            return native
        return merge(native, groups, raw[1], is_anchor=lambda fr: fr.name == VM_ENTRY)

    def counters(self) -> list[int]:
        if self._kernel is None:
            return [0] * schema.PHP_STAT_MAX
        return self._kernel.counters()

    def stats(self) -> dict[str, int]:
        if self._kernel is not None:
            try:
                for i, delta in enumerate(self._kernel.counters()):
                    self._totals[i] += delta
            except Exception:
                pass
        t = self._totals
        return {"processes": len(self._procs), "walks": t[schema.PHP_STAT_WALKS],
                "no_frame": t[schema.PHP_STAT_NO_FRAME], "truncated": t[schema.PHP_STAT_TRUNCATED],
                "functions_read": self.reads, "unknown": self.misses}

    def _drop(self, pid: int) -> None:
        with self._lock:
            found = self._procs.pop(pid, None)
        self._funcs.pop(pid, None)
        self._lines.pop(pid, None)
        if found is not None and self._kernel is not None:
            self._kernel.untrack(pid)

    def forget(self, pid: int) -> None:
        self._retry.pop(pid, None)
        self._drop(pid)

    def forget_dead(self) -> None:
        for pid, (_proc, process) in list(self._procs.items()):
            if process is not None and process.is_current():
                continue
            self._drop(pid)
            if process is not None and procs.exists(pid):
                self.observe(pid)
        for pid in list(self._retry):
            if not procs.exists(pid):
                self._retry.pop(pid, None)


__all__ = ["PhpSource", "parse_stack", "vm_groups"]
