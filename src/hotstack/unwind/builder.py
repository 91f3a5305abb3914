"""build_table_fast: one file's UnwindTable from its CFI, with the vectorized evaluator.

Same inputs and the same result as table.build_table (rows compared in
tests/unwind/test_fast_tables.py), ~20-60x faster (bench/unwind_tables.py).
"""

from __future__ import annotations

import zlib

import numpy as np

from .. import malloc
from ..symbols.elf import ElfError, ElfFile
from . import cfi
from .fastcfi import join_columns, parse_fast
from .table import Rule, UnwindTable, _decompressed


def build_table_fast(elf: ElfFile, debug_elf: ElfFile | None = None, debug_frame: bool = True) -> UnwindTable:
    """`debug_frame` False: .eh_frame only (Go binaries: their .debug_frame gives no RBP rule, the
    frame-pointer rows from .gopclntab describe Go functions better)."""
    parts: list[dict] = []
    fdes = fp_fdes = 0
    sources: list[str] = []
    arch = cfi.arch_of(elf.machine)         # x86-64 or arm64 registers, by the ELF's e_machine
    for source_elf, name, debug in ((elf, ".eh_frame", False), (elf, ".debug_frame", True),
                                    (debug_elf, ".debug_frame", True)):
        if source_elf is None or arch is None or (debug and not debug_frame):
            continue
        section = source_elf.section(name)
        if section is None or section.size == 0:
            continue
        if debug and fdes >= 8 and source_elf is debug_elf:
            break
        if section.type == 8:
            continue
        try:
            data = _decompressed(source_elf.section_data(section, cap=256 << 20))
        except (ElfError, zlib.error):
            continue
        hdr = hdr_addr = None
        if not debug:
            hdr_section = source_elf.section(".eh_frame_hdr")
            if hdr_section is not None and hdr_section.type != 8:
                try:
                    hdr, hdr_addr = source_elf.section_data(hdr_section, cap=64 << 20), hdr_section.addr
                except ElfError:
                    hdr = None
        rows, n, fp = parse_fast(data, section.addr, debug_frame=debug, hdr=hdr, hdr_addr=hdr_addr or 0,
                                 arch=arch)
        fp_fdes += fp
        if len(rows["pc"]):
            # .debug_frame rows go first so that .eh_frame rows win at equal pcs (as table.py)
            rows["source"] = np.full(len(rows["pc"]), -(len(parts) + 1) if debug else len(parts), np.int8)
            parts.append(rows)
            fdes += n
            sources.append(name if source_elf is elf else f"debug:{name}")
        del rows    # parts holds them: rows_to_table frees each column as it goes
    table = rows_to_table(parts, fdes, fp_fdes, "+".join(sources))
    malloc.trim()       # the build's columns were freed: their pages go back (hotstack/malloc.py)
    table.go = elf.section(".gopclntab") is not None or elf.section(".go.buildinfo") is not None
    return table


def rows_to_table(parts: list[dict], fdes: int, fp_fdes: int, source: str) -> UnwindTable:
    """UnwindTable.from_rows, vectorized (`parts` is consumed): at one pc a real row wins over an FDE end, among real
    rows the last in parse order; consecutive equal rules merge; rules are deduplicated."""
    if not parts:
        return UnwindTable(np.zeros(0, np.uint64), np.zeros(0, np.uint16), [], fdes, 0, source)
    names = ("pc", "kind", "cfa", "rbp", "ra", "order", "source")
    col = dict(zip(names, join_columns(parts, names)))
    pc, kind = col["pc"], col["kind"]
    is_real = (kind != cfi.KIND_END).astype(np.int8)
    # (views, not copies, and each temporary dropped when done: these columns are 8 MB per million rows)
    order = np.lexsort((col["order"], col["source"], is_real, pc.view(np.uint64)))
    pc_s = pc[order]
    keep = np.ones(len(order), bool)
    keep[:-1] = pc_s[1:] != pc_s[:-1]
    del pc_s
    sel = order[keep]
    del order, keep
    pc_k = pc[sel].view(np.uint64)
    kind_k = kind[sel]
    end = kind_k == cfi.KIND_END
    kind_k = np.where(end, cfi.KIND_INVALID, kind_k)
    cfa_k = np.where(end, 0, col["cfa"][sel])
    rbp_k = np.where(end, 0, col["rbp"][sel])
    ra_k = np.where(end, 0, col["ra"][sel])
    del col, pc, kind, is_real, sel, end     # a large library has millions of rows
    change = np.ones(len(pc_k), bool)
    change[1:] = (kind_k[1:] != kind_k[:-1]) | (cfa_k[1:] != cfa_k[:-1]) | (rbp_k[1:] != rbp_k[:-1]) \
        | (ra_k[1:] != ra_k[:-1])
    pc_k, kind_k, cfa_k, rbp_k, ra_k = pc_k[change], kind_k[change], cfa_k[change], rbp_k[change], ra_k[change]
    # rule ids: rules numbered in the order of two packed 64-bit keys, each rule's first row naming it.
    # One stable sort of both keys instead of np.unique on each and on their pair: the same ids,
    # and the three uniques' sorted copies and inverses were the builder's peak (libLLVM-15).
    key1 = (kind_k.astype(np.int64) << 40) ^ (cfa_k.astype(np.int64) & 0xFFFFFFFFFF)
    key2 = (rbp_k.astype(np.int64) << 32) ^ (ra_k.astype(np.int64) & 0xFFFFFFFF)
    order = np.lexsort((key2, key1))
    new = np.ones(len(order), bool)
    k = key1[order]
    new[1:] = k[1:] != k[:-1]
    k = key2[order]
    new[1:] |= k[1:] != k[:-1]
    del k, key1, key2
    first = order[new]          # lexsort is stable: the first row of each rule
    count = len(first)
    ids = np.empty(len(order), np.uint16 if count < 1 << 16 else np.uint32)
    ids[order] = np.cumsum(new, dtype=np.uint32) - 1
    del order, new
    rules = [Rule(int(a), int(b), int(c), int(d)) for a, b, c, d in
             zip(kind_k[first].tolist(), cfa_k[first].tolist(), rbp_k[first].tolist(), ra_k[first].tolist())]
    return UnwindTable(pc_k, ids, rules, fdes, fp_fdes, source)
