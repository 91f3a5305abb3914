"""Bytecode index -> source line of a HotSpot method, from its compressed line number table.

A ConstMethod is followed by the method's bytecodes (`_code_size` bytes). When its flags have
the line-table bit, the class file's LineNumberTable follows in HotSpot's compressed form. It is a
stream of (bci, line) deltas from (0, 0), each either one byte (bci delta << 3 | line delta, for a bci delta
below 32 and a line delta below 8; never 0 or 0xff) or 0xff followed by the two deltas as signed
ints of the CompressedReadStream (zigzag: the low bit is the sign), ended by a 0 byte. A bci's line
is the one of the entry with that bci, else of the last entry with the greatest bci below it (as
Method::line_number_from_bci), or none.
"""

from __future__ import annotations

from ..common.memory import MemoryReadError, Process
from .jvm import JvmLayout

MAX_TABLE = 1 << 16        # bytes of a line table read at most (a method's code is below 64 KiB)
FIRST_READ = 256           # most tables are a few dozen bytes: one read, larger ones read again
MAX_ENTRIES = 1 << 14      # tables cached per process; beyond this the cache starts again


def read_int(data: bytes, pos: int, excess: int = 0) -> tuple[int, int]:
    """One int of HotSpot's CompressedReadStream, and the position after it. UNSIGNED5: a byte
    below 192 ends a number, each further byte adds 6 bits more; from JDK 21 every byte is
    stored with an excess of 1 (no byte is 0), the last bytes below 192 before it."""
    low = 192 - excess
    b = data[pos] - excess
    pos += 1
    if b < low:
        return b, pos
    total, shift = b, 6
    for i in range(4):
        b = data[pos] - excess
        pos += 1
        total += b << shift
        if b < low or i == 3:
            break
        shift += 6
    return total, pos


def _signed(value: int) -> int:
    """A CompressedReadStream signed int from its unsigned form (low bit: the sign)."""
    return (value >> 1) ^ -(value & 1)


def decode_table(data: bytes, excess: int = 0) -> list[tuple[int, int]]:
    """The (bci, line) entries of a compressed line number table; IndexError if `data` ends first."""
    out: list[tuple[int, int]] = []
    bci = line = pos = 0
    while True:
        byte = data[pos]
        pos += 1
        if byte == 0:
            return out
        if byte == 0xFF:
            delta, pos = read_int(data, pos, excess)
            bci += _signed(delta)
            delta, pos = read_int(data, pos, excess)
            line += _signed(delta)
        else:
            bci += byte >> 3
            line += byte & 7
        out.append((bci, line))


def line_of(table: list[tuple[int, int]], bci: int) -> int:
    """The line of `bci` in a decoded table (0: none)."""
    best_bci, best_line = 0, 0
    for at, line in table:
        if at == bci:
            return line
        if best_bci <= at < bci:
            best_bci, best_line = at, line
    return best_line


class LineTables:
    """The line tables of one JVM's methods, by ConstMethod address (a ConstMethod and its table never
    change while the method lives; the caller checks the Method still points at it)."""

    def __init__(self, mem: Process, layout: JvmLayout) -> None:
        self.mem = mem
        self.l = layout
        self._tables: dict[int, tuple[int, list[tuple[int, int]] | None]] = {}

    def code_base(self, const: int) -> int:
        """Where a ConstMethod's bytecodes begin."""
        return const + self.l.const_size

    def line(self, const: int, bci: int) -> int:
        """The source line of `bci` in the method of ConstMethod `const` (0: unknown, or no table,
        or a bci outside its code). MemoryReadError if the method cannot be read."""
        if not self.l.reads_lines or bci < 0:
            return 0
        found = self._tables.get(const)
        if found is None:
            found = self._read(const)
            if len(self._tables) >= MAX_ENTRIES:
                self._tables.clear()
            self._tables[const] = found
        code_size, table = found
        if table is None or bci >= code_size:
            return 0
        return line_of(table, bci)

    def _read(self, const: int) -> tuple[int, list[tuple[int, int]] | None]:
        l, mem = self.l, self.mem
        code_size = int.from_bytes(mem.read(const + l.const_code_size, 2), "little")
        flags = int.from_bytes(mem.read(const + l.const_flags, l.const_flags_size), "little")
        if not flags & l.has_line_table:
            return code_size, None
        start = self.code_base(const) + code_size
        size = FIRST_READ
        while True:
            try:
                return code_size, decode_table(mem.read(start, size), l.stream_excess)
            except IndexError:
                if size >= MAX_TABLE:
                    return code_size, None
                size = MAX_TABLE if size * 16 > MAX_TABLE else size * 16
            except MemoryReadError:
                if size == FIRST_READ:
                    raise
                return code_size, None      # a larger read ran past the mapping: no table
