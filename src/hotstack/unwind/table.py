"""UnwindTable: the compact, sorted unwind rules of one ELF file.

Built once per file from its .eh_frame (and .debug_frame, of the file or of its
separate debug file) and cached per build id. Storage is two numpy arrays:
`pcs` (u64, sorted row starts, ELF virtual addresses) and `rule_ids` (u16/u32
into `rules`, the file's deduplicated rules: kind, cfa_offset, rbp_offset,
ra_offset). The rule carries the return address offset so that an architecture
whose return address is not at CFA-8 (aarch64: LR) fits the same table.
"""

from __future__ import annotations

import array
import bisect
import zlib
from dataclasses import dataclass

import numpy as np

from ..symbols.elf import ElfError, ElfFile
from . import cfi

# A file is "built with frame pointers" when most of its functions set CFA = RBP + 16.
# Measured: gcc -fno-omit-frame-pointer code is above 0.9, Debian's libc and
# libpython (-fomit-frame-pointer) are below 0.05.
FRAME_POINTER_SHARE = 0.5
MIN_FDES_FOR_VERDICT = 1
_MEMO_MAX = 4096


@dataclass(frozen=True, slots=True)
class Rule:
    kind: int
    cfa_offset: int
    rbp_offset: int       # cfi.RBP_SAME: RBP unchanged; for KIND_PLT: the (RIP & 15) threshold
    ra_offset: int


class UnwindTable:
    def __init__(self, pcs: np.ndarray, rule_ids: np.ndarray, rules: list[Rule], fdes: int,
                 fp_fdes: int, source: str) -> None:
        self.pcs = pcs
        self.rule_ids = rule_ids
        self.rules = rules
        self.fdes = fdes
        self.fp_fdes = fp_fdes               # FDEs whose CFA moves to RBP somewhere
        self.source = source                 # which sections the rows came from
        self.go = False                      # a Go binary: frame pointers by the Go ABI
        self._pcs_array: array.array | None = None
        self._memo: dict[int, Rule | None] = {}

    @property
    def nbytes(self) -> int:
        extra = len(self._pcs_array) * (8 + self._ids_array.itemsize) if self._pcs_array is not None else 0
        return int(self.pcs.nbytes + self.rule_ids.nbytes) + extra + 48 * len(self.rules)

    def __len__(self) -> int:
        return len(self.pcs)

    @property
    def uses_frame_pointers(self) -> bool | None:
        """True/False when the file's code visibly does/doesn't keep frame pointers; None: unknown."""
        if self.go:
            return True          # its CFI never mentions RBP, yet every Go frame keeps one
        if self.fdes < MIN_FDES_FOR_VERDICT:
            return None
        return self.fp_fdes >= FRAME_POINTER_SHARE * self.fdes

    def find(self, vaddr: int) -> Rule | None:
        """The rule that holds at `vaddr`, or None (no unwind info there)."""
        try:
            return self._memo[vaddr]     # hot code: the same few return addresses again and again
        except KeyError:
            pass
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        rule = self._memo[vaddr] = self._find(vaddr)
        return rule

    def _find(self, vaddr: int) -> Rule | None:
        pcs = self._pcs_array
        if pcs is None:
            # bisect over an array.array: ~1 us per lookup and 8 bytes per row, where
            # np.searchsorted on one Python int costs ~70 us and a list ~40 bytes per row.
            pcs = self._pcs_array = array.array("Q")
            pcs.frombytes(self.pcs.tobytes())
            self._ids_array = array.array("H" if self.rule_ids.dtype == np.uint16 else "I")
            self._ids_array.frombytes(self.rule_ids.tobytes())
        i = bisect.bisect_right(pcs, vaddr) - 1
        if i < 0:
            return None
        rule = self.rules[self._ids_array[i]]
        return None if rule.kind == cfi.KIND_INVALID else rule

    def lookup_many(self, vaddrs: np.ndarray) -> np.ndarray:
        """Rule ids for many addresses at once (-1 where none)."""
        idx = np.searchsorted(self.pcs, vaddrs, side="right") - 1
        out = np.where(idx >= 0, self.rule_ids[np.maximum(idx, 0)].astype(np.int64), -1)
        return out

    @classmethod
    def from_rows(cls, rows: list[tuple], fdes: int, source: str) -> "UnwindTable":
        if not rows:
            return cls(np.zeros(0, np.uint64), np.zeros(0, np.uint16), [], fdes, 0, source)
        arr = np.array(rows, dtype=np.int64)
        pcs, kinds = arr[:, 0], arr[:, 1]
        # At one pc, a real row wins over the end of the previous FDE; among real rows the last wins.
        is_real = (kinds != cfi.KIND_END).astype(np.int64)
        order = np.lexsort((np.arange(len(arr)), is_real, pcs))
        arr = arr[order]
        keep = np.ones(len(arr), dtype=bool)
        keep[:-1] = arr[1:, 0] != arr[:-1, 0]
        arr = arr[keep]
        arr[arr[:, 1] == cfi.KIND_END, 1:] = (cfi.KIND_INVALID, 0, 0, 0)
        # Consecutive rows with the same rule are one row.
        body = arr[:, 1:]
        change = np.ones(len(arr), dtype=bool)
        change[1:] = np.any(body[1:] != body[:-1], axis=1)
        arr = arr[change]
        # Deduplicate rules with a dict: np.unique(axis=0) sorts rows and was 20x slower here.
        index: dict[tuple, int] = {}
        ids = [index.setdefault(rule, len(index)) for rule in map(tuple, arr[:, 1:].tolist())]
        rules = [Rule(*rule) for rule in index]
        rule_ids = np.array(ids, dtype=np.uint16 if len(rules) < 1 << 16 else np.uint32)
        fp_fdes = _count_fp_fdes(rows)
        return cls(arr[:, 0].astype(np.uint64), rule_ids, rules, fdes, fp_fdes, source)


def _count_fp_fdes(rows: list[tuple]) -> int:
    """FDEs (delimited by KIND_END rows, in parse order) that have a CFA=RBP row."""
    count, seen_fp = 0, False
    for row in rows:
        kind = row[1]
        if kind == cfi.KIND_CFA_FP:
            seen_fp = True
        elif kind == cfi.KIND_END:
            count += seen_fp
            seen_fp = False
    return count


def build_table(elf: ElfFile, debug_elf: ElfFile | None = None) -> UnwindTable:
    """Rows from .eh_frame, plus .debug_frame of the file or of its debug file.

    .eh_frame_hdr is not needed: it only indexes .eh_frame for a lookup that we
    do on the sorted table instead.
    """
    rows: list[tuple] = []
    fdes = 0
    sources = []
    arch = cfi.arch_of(elf.machine)
    for source_elf, name, debug in ((elf, ".eh_frame", False), (elf, ".debug_frame", True),
                                    (debug_elf, ".debug_frame", True)):
        if source_elf is None or arch is None:      # a machine we have no rules for: no rows
            continue
        section = source_elf.section(name)
        if section is None or section.size == 0:
            continue
        if debug and fdes >= 8 and source_elf is debug_elf:
            break          # .eh_frame already covers the file
        if section.type == 8:       # SHT_NOBITS: the section was stripped to a debug file
            continue
        try:
            data = _decompressed(source_elf.section_data(section, cap=256 << 20))
        except (ElfError, zlib.error):
            continue
        section_rows, n = cfi.parse(data, section.addr, debug_frame=debug, arch=arch)
        if section_rows:
            # .debug_frame rows go first so that .eh_frame rows win at equal pcs.
            rows = section_rows + rows if debug else rows + section_rows
            fdes += n
            sources.append(name if source_elf is elf else f"debug:{name}")
    table = UnwindTable.from_rows(rows, fdes, "+".join(sources))
    table.go = elf.section(".gopclntab") is not None or elf.section(".go.buildinfo") is not None
    return table


# A compressed section inflates to at most this much: any process's file is read, and a few KB of
# zlib can claim gigabytes (a zip bomb). The largest real .debug_frame seen is a few MB.
MAX_INFLATED = 64 << 20


def _decompressed(data: bytes) -> bytes:
    """Section bytes, inflated if compressed: SHF_COMPRESSED (an Elf64_Chdr, ch_type 1 = zlib; Go
    compresses its DWARF this way) or the older .zdebug "ZLIB" header. A real .debug_frame starts
    with a CIE length, never 1, so the check needs no section flags. zlib.error when the data
    would inflate past MAX_INFLATED."""
    if len(data) >= 24 and int.from_bytes(data[:4], "little") == 1:
        return _inflate(data[24:])
    if data[:4] == b"ZLIB" and len(data) >= 12:
        return _inflate(data[12:])
    return data


def _inflate(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, MAX_INFLATED)
    if inflater.unconsumed_tail:
        raise zlib.error(f"a compressed section inflates past {MAX_INFLATED >> 20} MB")
    return out
