"""Method names of C-function frames: a method entry's ID -> its name, from Ruby's symbol table.

Ruby keeps every ID's name in `ruby_global_symbols` (rb_symbols_t: last_id, str_sym, ids): `ids`
is an Array of chunks of 512 (name, symbol) pairs, indexed by the ID's serial. The table is not
an exported symbol in distribution builds, so its address is taken from `rb_sym_all_symbols`,
whose code loads `ruby_global_symbols.str_sym` RIP-relative: each such load in its first bytes
is a candidate, and the one whose table looks right in the process (a plausible last_id, `ids`
an Array) is kept.
"""

from __future__ import annotations

import struct

from ...symbols.elf import ElfError, ElfFile
from ..common.memory import MemoryReadError, Process
from .iseq import T_ARRAY, T_MASK, array_items, read_string
from .offsets import RubyOffsets

ID_SCOPE_SHIFT = 4
ID_ENTRY_UNIT = 512
SCAN_BYTES = 64


def table_candidates(path: str, function: int) -> tuple[int, ...]:
    """vaddrs that may be `ruby_global_symbols`: RIP-relative 64-bit loads in `function`, minus 8."""
    if not function:
        return ()
    try:
        with ElfFile(path) as elf:
            off = elf.vaddr_to_file_offset(function)
            if off is None:
                return ()
            code = elf.read(off, min(SCAN_BYTES, elf.size - off))
    except ElfError:
        return ()
    out = []
    for i in range(len(code) - 7):
        # REX.W (+R) 8B /r with mod=00 rm=101: mov r64, [rip + disp32]
        if code[i] in (0x48, 0x4C) and code[i + 1] == 0x8B and code[i + 2] & 0xC7 == 0x05:
            disp = struct.unpack_from("<i", code, i + 3)[0]
            out.append(function + i + 7 + disp - 8)
    return tuple(out)


def find_table(mem: Process, base: int, candidates: tuple[int, ...]) -> int:
    """The address of ruby_global_symbols in the process, or 0."""
    for vaddr in candidates:
        try:
            last_id = mem.u32(base + vaddr)
            ids = mem.u64(base + vaddr + 16)
            if 0 < last_id < 1 << 24 and ids and not ids & 7 and mem.u64(ids) & T_MASK == T_ARRAY:
                return base + vaddr
        except MemoryReadError:
            continue
    return 0


def method_name(mem: Process, o: RubyOffsets, table: int, last_op_id: int, method_id: int) -> str:
    serial = method_id >> ID_SCOPE_SHIFT if method_id > last_op_id else method_id
    if serial == 0 or serial > mem.u32(table):
        raise MemoryReadError(f"ID {method_id:#x} is not in the symbol table")
    chunks = array_items(mem, mem.u64(table + 16), serial // ID_ENTRY_UNIT + 1)
    if len(chunks) <= serial // ID_ENTRY_UNIT:
        raise MemoryReadError(f"ID {method_id:#x}: no chunk")
    chunk = chunks[serial // ID_ENTRY_UNIT]
    pair = array_items(mem, chunk, (serial % ID_ENTRY_UNIT) * 2 + 1)
    return read_string(mem, o, pair[(serial % ID_ENTRY_UNIT) * 2])
