"""build_table_fast: one file's UnwindTable from its CFI, with the vectorized evaluator.

Same inputs and the same result as table.build_table (rows compared in
tests/unwind/test_fast_tables.py), ~3x faster (bench/unwind_tables.py: libc, libpython).
"""

from __future__ import annotations

import zlib

import numpy as np

from .. import malloc
from ..symbols.elf import ElfError, ElfFile
from . import cfi
from .cfi_rows import RuleIds, join_columns, rule_keys
from .fastcfi import parse_fast
from .table import Rule, UnwindTable, _decompressed


def build_table_fast(elf: ElfFile, debug_elf: ElfFile | None = None, debug_frame: bool = True) -> UnwindTable:
    """`debug_frame` False: .eh_frame only (Go binaries: their .debug_frame gives no RBP rule, the
    frame-pointer rows from .gopclntab describe Go functions better)."""
    parts: list[dict] = []
    rules = RuleIds()        # (every section's rows name their rules by one numbering)
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
                                 arch=arch, rules=rules)
        fp_fdes += fp
        if len(rows["pc"]):
            # .debug_frame rows go first so that .eh_frame rows win at equal pcs (as table.py)
            rows["source"] = np.full(len(rows["pc"]), -(len(parts) + 1) if debug else len(parts), np.int8)
            parts.append(rows)
            fdes += n
            sources.append(name if source_elf is elf else f"debug:{name}")
        del rows    # parts holds them: rows_to_table frees each column as it goes
    data = hdr = None       # (the last section's bytes: not held through rows_to_table, the build's peak)
    table = rows_to_table(parts, rules, fdes, fp_fdes, "+".join(sources))
    malloc.trim()       # the build's columns were freed: their pages go back (hotstack/malloc.py)
    table.go = elf.section(".gopclntab") is not None or elf.section(".go.buildinfo") is not None
    return table


def rows_to_table(parts: list[dict], rules: RuleIds, fdes: int, fp_fdes: int, source: str) -> UnwindTable:
    """UnwindTable.from_rows, vectorized (`parts` is consumed; their rows name rules in `rules`): at one pc
    a real row wins over an FDE end, among real rows the last in parse order; consecutive equal rules
    merge; rules are deduplicated."""
    if not parts:
        return UnwindTable(np.zeros(0, np.uint64), np.zeros(0, np.uint16), [], fdes, 0, source)
    names = ("pc", "rule", "order", "source")
    col = dict(zip(names, join_columns(parts, names)))
    pc, rule = col.pop("pc"), col.pop("rule")
    invalid = rules.id_of((cfi.KIND_INVALID, 0, 0, 0))      # what an FDE's end row says (no rule)
    table = np.array(rules.rules, np.int64).reshape(-1, 4)     # id -> (kind, cfa, rbp, ra)
    is_end = table[:, 0] == cfi.KIND_END
    is_real = (~is_end[rule]).astype(np.int8)
    # (views, not copies, and each column and temporary dropped when done: these columns are 8 MB per
    # million rows; a large library's build peaked here)
    order = np.lexsort((col.pop("order"), col.pop("source"), is_real, pc.view(np.uint64)))
    del col, is_real
    pc_s = pc[order]
    keep = np.ones(len(order), bool)
    keep[:-1] = pc_s[1:] != pc_s[:-1]
    del pc_s
    sel = order[keep]
    del order, keep
    pc_k = pc[sel].view(np.uint64)
    del pc
    to_rule = np.arange(len(table), dtype=np.int32)
    to_rule[is_end] = invalid
    rule_k = to_rule[rule[sel]]
    del rule, sel
    change = np.ones(len(pc_k), bool)
    change[1:] = rule_k[1:] != rule_k[:-1]          # (one id per distinct rule: equal ids, equal rules)
    pc_k, rule_k = pc_k[change], rule_k[change]
    del change
    # the rules present, numbered in the order of their two 64-bit keys (as np.unique of the pairs would)
    present = np.unique(rule_k)
    key1, key2 = rule_keys(table[present, 0], table[present, 1], table[present, 2], table[present, 3])
    ranked = present[np.lexsort((key2, key1))]
    number = np.zeros(len(table), np.uint32)
    number[ranked] = np.arange(len(ranked), dtype=np.uint32)
    ids = number[rule_k].astype(np.uint16 if len(ranked) < 1 << 16 else np.uint32)
    out_rules = [Rule(*r) for r in table[ranked].tolist()]
    return UnwindTable(pc_k, ids, out_rules, fdes, fp_fdes, source)
