"""Call frame information evaluated with numpy: every CFA instruction of a section at once.

cfi.py runs the DWARF CFA state machine one opcode at a time in Python; on libpython that
is ~0.3 s per file (bench/unwind_tables.py). Here the same machine is evaluated for all FDEs
together, with the same semantics (tests/unwind/test_fast_tables.py compares both builders
row for row):

1. Headers (cfi_headers.py): per FDE its CIE, pc range and instruction bytes, through
   .eh_frame_hdr's table or one pass over the records.
2. Instructions (cfi_decode.py): in slices of the section, the length of an instruction that
   would start at each byte is computed for every byte at once; a frontier walk from each FDE's
   first byte then marks the real instruction starts.
3. State (cfi_state.py): each rule is "the last instruction that wrote it" (a running maximum of
   writer indexes), restore and restore_state copies resolved by pointer jumping. A row is
   emitted at every advance_loc with the state at that point, plus the final state and an end
   row, exactly as cfi.parse does.
4. Rows (cfi_rows.py): compact columns with rule ids, joined and ranked.

FDEs that use what the vectorized pass does not model (DW_CFA_set_loc, CFA expressions such
as the PLT's, restore_state without remember_state, malformed bytes) go through cfi.py's
per-FDE evaluator instead: a handful per file.
"""

from __future__ import annotations

import struct

import numpy as np

from . import cfi
from .cfi_headers import FdeHeaders, fde_header_end, fde_headers
from .cfi_rows import SEQ_LAST, RuleIds, compact_rows, join_columns
from .cfi_state import RA_UNDEFINED, ByCie, FdeColumns, evaluate_slice

# FDEs are evaluated in slices of about this many bytes of instructions: every array is per byte or
# per instruction of the slice, ~115 bytes of them per byte of section. The whole .eh_frame of a
# large library at once (libLLVM: 5.2 MB) peaks at 600 MB; slices of 256 KiB bound that to ~30 MB,
# of 64 KiB to ~7 MB, for the same CPU (bench/table_memory.py).
CHUNK_BYTES = 64 << 10


def parse_fast(data: bytes, section_addr: int, debug_frame: bool = False, hdr: bytes | None = None,
               hdr_addr: int = 0, arch: cfi.Arch = cfi.X86_64, rules: RuleIds | None = None
               ) -> tuple[dict, int, int]:
    """Rows of every FDE of a .eh_frame/.debug_frame section, as arrays.

    Returns ({pc, rule, order}, FDEs, FDEs with a CFA=RBP row): `rule` the row's id in `rules` (its
    kind, CFA, RBP and return-address rules; one RuleIds for every section of a file), `order` ranks
    the rows as cfi.parse would have listed them (it matters only where two rows share a pc).
    `hdr`: the .eh_frame_hdr bytes, if any (its table locates the FDEs without a walk).
    `arch`: the registers of the ELF's machine (cfi.arch_of(e_machine)).
    """
    h = fde_headers(data, section_addr, debug_frame, hdr, hdr_addr, arch)
    nf = len(h.offset)
    if nf == 0:
        return {k: np.zeros(0, np.int64) for k in ("pc", "rule", "order")}, 0, 0
    rules = RuleIds() if rules is None else rules
    f, signal, evaluate, valid = _fde_columns(data, h, arch)
    parts: list[tuple] = []
    fp: set[int] = set()
    no_ops = []
    for ev in _chunks(np.flatnonzero(evaluate & (f.ins_end > f.ins_start)), f.ins_start, CHUNK_BYTES):
        *rows, no_ops_here = evaluate_slice(f, ev)
        parts.append(_fast_rows(rules, f, h.offset, fp, *rows))
        no_ops.append(no_ops_here)
    # evaluated FDEs without any instruction: their CIE's initial state
    bare = np.concatenate([np.flatnonzero(evaluate & (f.ins_end == f.ins_start))] + no_ops)
    parts.append(_fast_rows(rules, f, h.offset, fp, bare, f.pc_begin[bare], f.i_reg[bare], f.i_off[bare],
                            f.i_rbp[bare], f.i_ra[bare], np.full(len(bare), SEQ_LAST)))
    parts.extend(_signal_and_end_rows(rules, h, valid & signal, valid & ~f.slow))
    parts.extend(_slow_fde_rows(data, section_addr, debug_frame, h, f.ins_end, np.flatnonzero(f.slow), rules, fp))
    # the FDEs' own arrays (a dozen per FDE; ~4 MB for a library of 30k FDEs) go before the rows
    # are joined and sorted, the build's peak
    del h, f, signal, evaluate, valid, bare, no_ops
    return _ranked(parts), nf, len(fp)


def _fde_columns(data: bytes, h: FdeHeaders, arch: cfi.Arch) -> tuple[FdeColumns, np.ndarray, np.ndarray, np.ndarray]:
    """The FDEs' columns for the evaluation, with the CIEs' initial states (few: evaluated by
    cfi.py), and three masks over the FDEs: signal frames, FDEs to evaluate, valid FDEs."""
    init = []
    for c in h.cies:
        st = cfi._State(arch)
        try:
            cfi._execute(c.initial, st, None, c, 0, None)
            ok = st.kind == cfi.KIND_CFA_SP
        except (cfi.CfiError, IndexError, struct.error, ValueError):
            ok = False
        init.append((st.cfa_reg, st.cfa_off, st.rbp_off, RA_UNDEFINED if st.ra_off is None else st.ra_off,
                     ok, c.code_align, c.data_align, c.ra_reg, c.signal))
    ci = np.array(init, np.int64)
    i_reg, i_off, i_rbp, i_ra, code_align, data_align, ra_reg = (ByCie(ci[:, k], h.cie) for k in (0, 1, 2, 3, 5, 6, 7))
    cie_ok, signal = ci[h.cie, 4] != 0, ci[h.cie, 8] != 0
    valid = (h.pc_begin != 0) & (h.pc_range != 0) & (h.ins_end >= h.ins_start)
    f = FdeColumns(data=data, arch=arch, pc_begin=h.pc_begin, ins_start=h.ins_start, ins_end=h.ins_end,
                   slow=valid & ~signal & ~cie_ok, code_align=code_align, data_align=data_align, ra_reg=ra_reg,
                   i_reg=i_reg, i_off=i_off, i_rbp=i_rbp, i_ra=i_ra)
    return f, signal, valid & ~signal & cie_ok, valid


def _fast_rows(rules: RuleIds, f: FdeColumns, offset: np.ndarray, fp: set[int], row_fde, loc, cfa_reg, cfa_off,
               rbp, ra, seq) -> tuple[np.ndarray, ...]:
    """The rows of FDEs that stay on the fast path, in compact columns; FDEs with a CFA=RBP row
    are added to `fp`."""
    arch = f.arch
    kind = np.where(cfa_reg == arch.sp, cfi.KIND_CFA_SP,
                    np.where(cfa_reg == arch.fp, cfi.KIND_CFA_FP, cfi.KIND_INVALID))
    kind = np.where(ra == RA_UNDEFINED, cfi.KIND_STOP, kind)
    keep = ~f.slow[row_fde]
    row_fde, kind = row_fde[keep], kind[keep]
    fp.update(np.unique(row_fde[kind == cfi.KIND_CFA_FP]).tolist())
    return compact_rows(rules, loc[keep], kind, cfa_off[keep], rbp[keep], ra[keep], offset[row_fde], seq[keep])


def _signal_and_end_rows(rules: RuleIds, h: FdeHeaders, signal: np.ndarray, ends: np.ndarray) -> list[tuple]:
    """A signal frame's one row at its start, and the end row of every FDE kept on the fast path."""
    sig = np.flatnonzero(signal)
    zero = np.zeros(len(sig), np.int64)
    out = [compact_rows(rules, h.pc_begin[sig], np.full(len(sig), cfi.KIND_SIGNAL), zero, zero, zero,
                        h.offset[sig], zero)]
    ends = np.flatnonzero(ends)
    zero = np.zeros(len(ends), np.int64)
    out.append(compact_rows(rules, h.pc_begin[ends] + h.pc_range[ends], np.full(len(ends), cfi.KIND_END),
                            zero, zero, zero, h.offset[ends], np.full(len(ends), SEQ_LAST + 1)))
    return out


def _slow_fde_rows(data: bytes, section_addr: int, debug_frame: bool, h: FdeHeaders, ins_end: np.ndarray,
                   slow: np.ndarray, rules: RuleIds, fp: set[int]) -> list[tuple]:
    """The rows of the FDEs left to cfi.py's evaluator, one by one; those with a CFA=RBP row are
    added to `fp`."""
    slow_rows: list[tuple] = []
    slow_keys: list[tuple[int, int]] = []
    states: dict = {}
    for i in slow.tolist():
        cie = h.cies[int(h.cie[i])]
        before = len(slow_rows)
        start = int(h.offset[i])
        try:
            cfi._fde(data, fde_header_end(data, start), int(ins_end[i]), cie, h.cie_offsets[int(h.cie[i])], states,
                     section_addr, debug_frame, slow_rows)
        except (cfi.CfiError, IndexError, struct.error, ValueError):
            pass
        if any(r[1] == cfi.KIND_CFA_FP for r in slow_rows[before:]):
            fp.add(i)
        slow_keys.extend((start, j) for j in range(len(slow_rows) - before))
    if not slow_rows:
        return []
    arr = np.array(slow_rows, np.int64)
    keys = np.array(slow_keys, np.int64)
    return [compact_rows(rules, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], keys[:, 0], keys[:, 1])]


def _ranked(parts: list[tuple]) -> dict:
    """The parts' rows joined: {pc, rule, order}, `order` the rank of each row as cfi.parse lists
    them (by FDE, then place in the FDE)."""
    columns = [list(p) for p in parts]
    parts.clear()
    pc, rule, fkey, seq = join_columns(columns, range(4))
    del columns
    order = np.lexsort((seq, fkey))
    del seq, fkey
    rank = np.empty(len(order), np.int32 if len(order) < 1 << 31 else np.int64)
    rank[order] = np.arange(len(order), dtype=rank.dtype)
    del order
    return {"pc": pc, "rule": rule, "order": rank}


def _chunks(fdes: np.ndarray, ins_start: np.ndarray, size: int) -> list[np.ndarray]:
    """`fdes` (sorted by where their instructions start) cut where the instructions pass `size` bytes
    from the first of the slice (an FDE longer than that is a slice of its own)."""
    out = []
    i, n = 0, len(fdes)
    starts = ins_start[fdes]
    while i < n:
        j = max(int(np.searchsorted(starts, starts[i] + size, side="left")), i + 1)
        out.append(fdes[i:j])
        i = j
    return out
