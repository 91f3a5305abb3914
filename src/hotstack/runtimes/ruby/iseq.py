"""Ruby frames -> `label (file:line)`, read from the target's memory.

An iseq frame is named from its instruction sequence: the label Ruby's own backtraces print
(`hot_a`, `block in run`, `<main>`), the file (the iseq's real path when it has one) and the line
of the frame's pc (the iseq's succinct position index -> its line table). A C-function frame is
named from its method entry: the method's name from Ruby's symbol table (symbols.py).

Identity: an iseq freed by the GC and its memory reused by another is caught because the pc the
walker took at the sample must lie inside the iseq's own instruction buffer; a read that fails or
an object of the wrong type gives `[unknown ruby]`, never a wrong name. Entries go with their
process (forget).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..common.memory import MemoryReadError, Process
from .offsets import RubyOffsets

T_MASK, T_STRING, T_ARRAY, T_IMEMO = 0x1F, 0x05, 0x07, 0x1A
IMEMO_ISEQ, IMEMO_MENT = 7, 6
FL_USHIFT = 12
RSTRING_NOEMBED = 1 << 13          # FL_USER1
RARRAY_EMBED = 1 << 13             # FL_USER1
MAX_STRING = 1024
MAX_INSNS = 1 << 22
MAX_ISEQS_PER_PROCESS = 50_000


@dataclass(frozen=True)
class IseqInfo:
    label: str
    path: str
    body: int
    encoded: int
    size: int                      # instructions, in VALUEs
    local_iseq: int


def is_object(value: int) -> bool:
    """A VALUE that points to an object (not nil, true, false, undef, a Fixnum, a static Symbol)."""
    return value > 0x100 and not value & 7


def imemo_type(flags: int) -> int:
    return (flags >> FL_USHIFT) & 0x0F if flags & T_MASK == T_IMEMO else -1


def read_string(mem: Process, o: RubyOffsets, address: int) -> str:
    flags = mem.u64(address)
    if flags & T_MASK != T_STRING:
        raise MemoryReadError(f"{address:#x} is not a string")
    if flags & RSTRING_NOEMBED:
        length, ptr = struct.unpack("<qQ", mem.read(address + 16, 16))
        data = mem.read(ptr, min(max(length, 0), MAX_STRING))
    else:
        length = (flags >> 14) & 0x1F if o.rstring_embed_len_in_flags else mem.u64(address + 16) & 0xFFFFFFFF
        data = mem.read(address + o.rstring_ary, min(length, MAX_STRING))
    return data.decode("utf-8", "replace")


def array_items(mem: Process, address: int, count: int) -> list[int]:
    flags = mem.u64(address)
    if flags & T_MASK != T_ARRAY:
        raise MemoryReadError(f"{address:#x} is not an array")
    if flags & RARRAY_EMBED:
        n = min((flags >> 15) & 0x7F, count)
        return list(struct.unpack(f"<{n}Q", mem.read(address + 16, 8 * n)))
    length = struct.unpack("<q", mem.read(address + 16, 8))[0]      # as.heap: len 16, aux 24, ptr 32
    ptr = mem.u64(address + 32)
    n = min(max(length, 0), count)
    return list(struct.unpack(f"<{n}Q", mem.read(ptr, 8 * n)))


def read_path(mem: Process, o: RubyOffsets, pathobj: int) -> str:
    """An iseq's pathobj is its path (a String) or [path, realpath]: the real path when there is one."""
    if mem.u64(pathobj) & T_MASK == T_STRING:
        return read_string(mem, o, pathobj)
    items = array_items(mem, pathobj, 2)
    for item in reversed(items):     # a realpath may be nil (eval'd code): then the path
        if is_object(item) and mem.u64(item) & T_MASK == T_STRING:
            return read_string(mem, o, item)
    raise MemoryReadError(f"pathobj {pathobj:#x} names no file")


def read_iseq(mem: Process, o: RubyOffsets, iseq: int) -> IseqInfo:
    if imemo_type(mem.u64(iseq)) != IMEMO_ISEQ:
        raise MemoryReadError(f"{iseq:#x} is not an iseq")
    body = mem.u64(iseq + o.iseq_body)
    size, encoded = mem.u32(body + o.body_size), mem.u64(body + o.body_encoded)
    pathobj, _base_label, label = struct.unpack("<3Q", mem.read(body + o.body_location, 24))
    return IseqInfo(label=read_string(mem, o, label), path=read_path(mem, o, pathobj), body=body,
                    encoded=encoded, size=size, local_iseq=mem.u64(body + o.local_iseq))


def _popcount(v: int) -> int:
    return bin(v).count("1")


def line_of(mem: Process, o: RubyOffsets, info: IseqInfo, pc: int) -> int:
    """The source line of `pc` in the iseq (0 if unknown).

    The line table has one entry per position where the line changes; a succinct bit vector
    (an immediate part for the first 54 positions, then blocks of 512 bits with running ranks)
    gives the entry of a position: its rank minus one. The pc points past the instruction
    being run, hence pos - 1.
    """
    count = mem.u32(info.body + o.insn_info_size)
    table = mem.u64(info.body + o.insn_info_body)
    if count == 0 or count > MAX_INSNS or not table:
        return 0
    if count == 1:
        return mem.u32(table)
    pos = (pc - info.encoded) // 8
    if pos:
        pos -= 1
    succ = mem.u64(info.body + o.succ_index_table)
    if not succ:
        return 0
    if pos < 54:
        imm = mem.u64(succ + (pos // 9) * 8)
        index = (imm >> ((pos % 9) * 7)) & 0x7F
    else:
        block = (pos - 54) // 512
        bit = (pos - 54) % 512
        base = succ + 48 + block * 80                # imm_part[6], then blocks of 80 bytes
        rank, small_ranks = struct.unpack("<I4xQ", mem.read(base, 16))
        small = bit // 64
        small_rank = 0 if small == 0 else (small_ranks >> ((small - 1) * 9)) & 0x1FF
        bits = mem.u64(base + 16 + small * 8)
        index = rank + small_rank + _popcount((bits << (63 - bit % 64)) & 0xFFFFFFFFFFFFFFFF)
    if index == 0 or index > count:
        return 0
    return mem.u32(table + (index - 1) * o.insn_info_entry)


class IseqCache:
    """Per-process cache of iseqs read from the target, and of lines per (iseq, pc)."""

    def __init__(self) -> None:
        self._iseqs: dict[int, dict[int, IseqInfo | None]] = {}
        self._lines: dict[int, dict[tuple[int, int], int]] = {}
        self.reads = 0
        self.misses = 0

    def iseq(self, mem: Process, o: RubyOffsets, iseq: int, pc: int) -> IseqInfo | None:
        """The iseq of the process `mem`, if it still is the one the sample saw (its pc inside its
        instructions)."""
        iseqs = self._iseqs.setdefault(mem.pid, {})
        info = iseqs.get(iseq, False)
        if info is False:
            self.reads += 1
            try:
                info = read_iseq(mem, o, iseq)
            except (MemoryReadError, struct.error):
                info = None
            if len(iseqs) >= MAX_ISEQS_PER_PROCESS:
                iseqs.clear()
            if info is not None:
                iseqs[iseq] = info
        if info is not None and not info.encoded <= pc <= info.encoded + 8 * info.size:
            iseqs.pop(iseq, None)     # reused since: read again, once
            try:
                info = read_iseq(mem, o, iseq)
            except (MemoryReadError, struct.error):
                info = None
            if info is None or not info.encoded <= pc <= info.encoded + 8 * info.size:
                return None
            iseqs[iseq] = info
        return info

    def line(self, mem: Process, o: RubyOffsets, info: IseqInfo, pc: int) -> int:
        lines = self._lines.setdefault(mem.pid, {})
        key = (info.body, pc)
        line = lines.get(key)
        if line is None:
            try:
                line = line_of(mem, o, info, pc)
            except (MemoryReadError, struct.error):
                line = 0
            if len(lines) >= MAX_ISEQS_PER_PROCESS:
                lines.clear()
            lines[key] = line
        return line

    def forget(self, pid: int) -> None:
        self._iseqs.pop(pid, None)
        self._lines.pop(pid, None)
