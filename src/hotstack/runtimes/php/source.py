"""PhpSource: the PHP frame source (runtimes/registry.py), on the model of RubySource.

Frames are named from the target's memory: a user function `Class::method` or `function` (or
`{main}` for a script's top level) with its file and the line of the frame's opline (read by the
walker at the sample); an internal function by its name. Each `execute_ex` native frame is replaced
by the frames that call of the VM ran: walking leaf first, a group ends after a ZEND_CALL_TOP frame.

Identity: the walker records, with each zend_function pointer, the function's identity at the
sample (hashes of its name and file, its first line: bpf/php.h). Code compiled per request (PHP-FPM
without opcache, closures) is freed at the request's end, and the next request's functions take its
memory, often before userspace reads it. So a function read from memory names a frame only if its
identity is the recorded one. Names are cached per process by identity: one read serves every
later request that compiles the same function, wherever it lands. No match: `[unknown php]`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ... import procs
from ...bpf import schema
from ..common.recorded_stack import stack_records
from ...profile.model import Frame, FrameKind
from ..common.memory import MemoryReadError, Process
from ..common.interpreter_source import InterpreterSource
from ..common.merge import merge
from ..common.walker_totals import WalkerTotals
from ..common.jit import JitWatch, merge_jit
from .detect import PhpOffsets, PhpProcess, detect


VM_ENTRY = "execute_ex"
JIT_MARKER = Frame("[php jit]", FrameKind.JIT, resolved=False)
CALL_TOP = 1 << 17
USER_FUNCTION, INTERNAL_FUNCTION, EVAL_CODE = 2, 1, 4     # zend_function.type
IS_STRING = 6
MAX_STRING = 1024
MAX_FUNCS_PER_PROCESS = 50_000
ZEND_OP_SIZE = 32


@dataclass(frozen=True, slots=True)
class RawPhpFrame:
    func: int
    opline: int
    ident: int
    call_info: int
    line: int = 0


@dataclass(frozen=True)
class FuncInfo:
    name: str
    file: str
    user: bool
    lines: range = range(0)          # line_start..line_end of an op_array
    opcodes: int = 0                 # where its opcodes are (zend_op: 32 bytes each) when read
    last: int | None = None          # how many (None: not known for the version)

    def has_op(self, offset: int) -> bool:
        """Is `offset` (a frame's opline less its opcodes, bpf/php.h) one of this function's?"""
        return self.last is None or (offset % ZEND_OP_SIZE == 0 and offset < ZEND_OP_SIZE * self.last)


def parse_stack(raw: bytes) -> tuple[list[RawPhpFrame], bool, int]:
    head, records = stack_records(raw, schema.PHP_STACK, schema.PHP_FRAME, schema.PHP_MAX_FRAMES,
                                  schema.PHP_STACK_TAIL_OFFSET)
    return [RawPhpFrame(*r) for r in records], bool(head.truncated), head.pid


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


def read_zstring(mem: Process, o: PhpOffsets, address: int) -> str:
    head = mem.read(address, o.str_val)
    if head[4] & 0x0F != IS_STRING:      # gc.u.type_info: the type in its low 4 bits
        raise MemoryReadError(f"{address:#x} is not a string")
    length = struct.unpack_from("<Q", head, o.str_len)[0]
    return mem.read(address + o.str_val, min(length, MAX_STRING)).decode("utf-8", "replace")


_FNV = 0x100000001B3
_MASK = (1 << 64) - 1


def identity(name_h: int, file_h: int, line_start: int) -> int:
    """The walker's `ident` of a function (bpf/php.h computes the same)."""
    return ((((name_h * _FNV) & _MASK) ^ file_h) * _FNV & _MASK) ^ line_start


def read_func(mem: Process, o: PhpOffsets, func: int) -> tuple[FuncInfo, int]:
    """The function at `func` now, and its identity."""
    kind = mem.u8(func + o.fn_type)
    if kind not in (USER_FUNCTION, INTERNAL_FUNCTION, EVAL_CODE):
        raise MemoryReadError(f"{func:#x} is not a function")
    user = kind != INTERNAL_FUNCTION     # eval'd code (`php -r`, eval()) is an op_array too
    name_ptr = mem.u64(func + o.fn_name)
    name = read_zstring(mem, o, name_ptr) if name_ptr else "{main}"
    name_h = mem.u64(name_ptr + o.str_h) if name_ptr else 0
    scope = mem.u64(func + o.fn_scope)
    if scope and name_ptr:
        name = f"{read_zstring(mem, o, mem.u64(scope + o.ce_name))}::{name}"
    file, file_h, line_start, line_end, opcodes, last = "", 0, 0, 0, 0, None
    if user:
        file_ptr, line_start, line_end = struct.unpack("<QII", mem.read(func + o.op_filename, 16))
        file = read_zstring(mem, o, file_ptr)
        file_h = mem.u64(file_ptr + o.str_h)
        if o.op_opcodes:
            opcodes, last = mem.u64(func + o.op_opcodes), mem.u32(func + o.op_last)
    return (FuncInfo(name, file, user, range(line_start, line_end + 1), opcodes, last),
            identity(name_h, file_h, line_start))


def _is_vm_entry(frame: Frame) -> bool:
    return frame.name == VM_ENTRY


class PhpSource(InterpreterSource):
    name = "php"
    label = "PHP"
    looks_for = ("php",)          # (detect: php* executables only)

    def __init__(self) -> None:
        super().__init__()
        self._procs: dict[int, tuple[PhpProcess, procs.ProcessInfo | None]] = {}
        self._funcs: dict[int, dict[int, FuncInfo]] = {}      # pid -> identity -> function
        self._totals = WalkerTotals(schema.PHP_STAT_MAX)
        self._jit: dict[int, JitWatch] = {}
        self.reads = self.misses = self.jit_stacks = 0

    def prepare(self) -> bool:
        return True

    def _tunable(self) -> int:
        return 1

    def _find(self, process: procs.Process) -> PhpProcess | None:
        return detect(process)

    def _record(self, proc: PhpProcess) -> bytes:
        o = proc.offsets
        if any(off % 8 or off >= 56 for off in (o.ed_func, o.ed_call_info, o.ed_prev)) or o.fn_name != 8:
            return None     # the walker reads these as words of the first 56 bytes (bpf/php.h)
        return schema.PHP_PROC.pack(current_execute_data=proc.executor_globals + o.current_execute_data,
                                    ed_func=o.ed_func, ed_call_info=o.ed_call_info, ed_prev=o.ed_prev,
                                    fn_name=o.fn_name, fn_filename=o.op_filename, op_lineno=o.op_lineno,
                                    str_h=o.str_h, op_opcodes=o.op_opcodes,
                                    op_last=o.op_last if o.op_opcodes else 0)

    def _parse(self, raw: bytes) -> tuple[list[RawPhpFrame], bool, int]:
        return parse_stack(raw)

    def _name_early(self, pid: int, entry, frames: list[RawPhpFrame]) -> None:
        for f in frames:
            if f.func:
                self._frame(entry[0], f)

    def _frame(self, proc: PhpProcess, f: RawPhpFrame) -> Frame:
        funcs = self._funcs.setdefault(proc.pid, {})
        info = funcs.get(f.ident) if f.ident else None
        if info is None and f.ident:
            self.reads += 1
            try:
                found, ident = read_func(proc.memory, proc.offsets, f.func)
            except (MemoryReadError, struct.error, IndexError):
                found, ident = None, 0
            if found is not None and ident == f.ident:      # still the function the sample saw
                if len(funcs) >= MAX_FUNCS_PER_PROCESS:
                    funcs.clear()
                info = funcs[ident] = found
        if info is None:
            self.misses += 1
            return Frame("[unknown php]", FrameKind.PHP, resolved=False)
        if not info.user:
            return Frame(info.name, FrameKind.PHP)
        # The VM keeps the current opline in a register and stores it in the frame only before a
        # call or anything that may throw. A frame just entered still holds the opline another
        # frame left in that slot of the VM stack, perhaps of code freed since. So its line is known
        # only when the opline is one of this function's own opcodes (the count is the same in
        # each compile of a function of the same identity; where they are is read at the sample).
        known = info.has_op(f.opline) and f.line in info.lines
        return Frame(info.name, FrameKind.PHP, file=info.file, line=f.line if known else 0)

    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]:
        raw = self._stacks.get(key) if key else None
        entry = self._procs.get(pid)
        if not raw or entry is None:
            return native
        groups = [[self._frame(entry[0], f) for f in g] for g in vm_groups(raw[0])]
        if not groups:
            return native
        jit = self._jit.get(pid)
        if jit is None:
            jit = self._jit[pid] = JitWatch(entry[0].memory, entry[0].jit)
        regions = jit.regions_for(native)
        if regions:
            merged = merge_jit(native, groups, raw[1], regions, JIT_MARKER)
            if merged is not None:
                self.jit_stacks += 1
                return merged
        return merge(native, groups, raw[1], is_anchor=_is_vm_entry)

    def counters(self) -> list[int]:
        if self._kernel is None:
            return [0] * schema.PHP_STAT_MAX
        return self._kernel.counters()

    def stats(self) -> dict[str, int]:
        t = self._totals.update(self._kernel)
        return {"processes": len(self._procs), "walks": t[schema.PHP_STAT_WALKS],
                "no_frame": t[schema.PHP_STAT_NO_FRAME], "truncated": t[schema.PHP_STAT_TRUNCATED],
                "register_oplines": t[schema.PHP_STAT_REGISTER_OPLINE],
                "functions_read": self.reads, "unknown": self.misses, "jit_stacks": self.jit_stacks}

    def _forget_state(self, pid: int, entry) -> None:
        self._funcs.pop(pid, None)
        self._jit.pop(pid, None)


__all__ = ["PhpSource", "parse_stack", "vm_groups"]
