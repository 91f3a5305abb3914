"""What the fuzzer does with one input, shared with test_crashers.py (which replays kept crashers).

Each reader may refuse its input with ElfError (GoPclntabError is one); anything else escaping
is a bug.
"""

from __future__ import annotations

from hotstack.symbols.debugfile import find_debug_file
from hotstack.symbols.elf import ElfError, ElfFile
from hotstack.symbols.gopclntab import GoPclntab, find_pclntab
from hotstack.symbols.perfmap import parse_perf_map
from hotstack.symbols.symtab import SymbolTable


def _probe_addresses(low: int, high: int) -> list[int]:
    high = min(high, (1 << 64) - 1)     # addresses are u64: a corrupt table may claim more
    if high <= low:
        return [low]
    step = max(1, (high - low) // 64)
    return list(range(low, high, step))[:80]


def exercise_elf(path: str) -> None:
    try:
        elf = ElfFile(path)
    except ElfError:
        return
    with elf:
        elf.build_id()
        try:
            elf.debuglink()
            find_debug_file(elf, path)
        except ElfError:
            pass
        for seg in elf.segments[:8]:
            elf.file_offset_to_vaddr(seg.offset)
        try:
            table = SymbolTable(elf)
        except ElfError:
            table = None
        if table is not None and len(table):
            addrs = _probe_addresses(int(table.values[0]), int(table.values[-1]) + 16)
            table.lookup_many(addrs)
        try:
            go = find_pclntab(elf)
        except ElfError:
            go = None
        if go is not None and len(go):
            addrs = _probe_addresses(int(go.entries[0]), int(go.ends[-1]) + 16)
            go.lookup_many(addrs)
            for a in addrs[:16]:
                go.line(a)


def exercise_pclntab(data: bytes) -> None:
    try:
        go = GoPclntab(data, text_start=0x401000)
    except ElfError:
        return
    if len(go):
        addrs = _probe_addresses(int(go.entries[0]), int(go.ends[-1]) + 16)
        go.lookup_many(addrs)
        for a in addrs[:16]:
            go.line(a)


def exercise_perf_map(data: bytes) -> None:
    starts, sizes, names = parse_perf_map(data)
    assert len(starts) == len(sizes) == len(names)
    assert all(int(a) < int(b) for a, b in zip(starts[:-1], starts[1:]))
