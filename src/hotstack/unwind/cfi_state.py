"""The rule state of every row of a slice of FDEs, evaluated at once with numpy.

Each rule (CFA register, CFA offset, saved RBP, return address) is "the last instruction that
wrote it" (a running maximum of writer indexes). DW_CFA_restore and DW_CFA_restore_state are
writers that copy another writer's value; those copies are resolved by pointer jumping, so a
remember/restore pair costs nothing extra. A row is emitted at every advance_loc with the state
at that point, plus the final state, exactly as cfi.parse does.
"""

from __future__ import annotations

import numpy as np

from . import cfi
from .cfi_decode import (C_ADV, C_ADV1, C_ADV2, C_ADV4, C_DEF_CFA, C_DEF_CFA_SF, C_DEF_OFF, C_DEF_OFF_SF,
                         C_DEF_REG, C_NEG_OFF, C_OFF_EXT, C_OFF_EXT_SF, C_OFFSET, C_REGISTER, C_REMEMBER,
                         C_RESTORE, C_RESTORE_STATE, C_SAME, C_UNDEFINED, C_VAL_OFFSET, SliceInstructions)
from .cfi_rows import SEQ_LAST

RA_UNDEFINED = np.int64(-(1 << 40))     # the return address rule is "undefined": outermost frame


class FdeColumns:
    """What the evaluation needs of every FDE of a section, one element per FDE (section order):
    its pc, where its instructions lie, its CIE's factors and initial rules (the per-CIE values
    indexed through `ByCie`), and `slow`: the FDEs left to cfi.py, set as the evaluation finds them."""

    __slots__ = ("data", "arch", "pc_begin", "ins_start", "ins_end", "slow", "code_align", "data_align",
                 "ra_reg", "i_reg", "i_off", "i_rbp", "i_ra")

    def __init__(self, **columns) -> None:
        for name, value in columns.items():
            setattr(self, name, value)


class ByCie:
    """A CIE's value for FDEs, indexed like a per-FDE column (FDE indexes -> their CIE's values)
    without a per-FDE copy: nine int64 columns for every FDE of a library held through the whole
    build would be ~7 MB (libLLVM-14: 95k FDEs)."""

    __slots__ = ("values", "cie")

    def __init__(self, values: np.ndarray, cie: np.ndarray) -> None:
        self.values, self.cie = values, cie

    def __getitem__(self, fdes):
        return self.values[self.cie[fdes]]


def evaluate_slice(f: FdeColumns, ev: np.ndarray) -> tuple[np.ndarray, ...]:
    """Rows of the FDEs `ev` (indexes, by section order) whose instructions lie together in one
    slice of the section: the per-byte and per-instruction arrays are sized by the slice.
    Returns (FDE, pc, CFA register, CFA offset, RBP rule, return-address rule, place in the FDE)
    per row, and the FDEs of `ev` that had no instruction."""
    lo, hi = int(f.ins_start[ev[0]]), int(f.ins_end[ev[-1]])
    ins = SliceInstructions(f.data, lo, hi, f.ins_start[ev] - lo, f.ins_end[ev] - lo, f.arch)
    fde, m = ins.fde, ins.m
    if ins.bad.any():
        f.slow[ev[np.unique(fde[ins.bad])]] = True
    g = ev[fde]                                      # FDE (index into the header arrays) of each instruction
    adv = ins.advances(f.code_align[g])
    copy, match_of_copy = _matched_restores(ins, ev, f.slow)
    first_op = np.searchsorted(fde, np.arange(len(ev)))
    fde_first = first_op[fde]

    # rows: at every advance (state before it, at the location before it) and after the last instruction
    cum = np.cumsum(adv)
    adv_base = np.where(first_op > 0, cum[np.maximum(first_op - 1, 0)], 0)
    adv_rows = ins.of(C_ADV, C_ADV1, C_ADV2, C_ADV4)
    last_op = np.full(len(ev), -1, np.int64)
    last_op[fde] = np.arange(m)
    fin_rows = last_op[last_op >= 0]
    at = np.concatenate((adv_rows, fin_rows))
    at_fde = g[at]
    loc = f.pc_begin[at_fde] + cum[at] - adv_base[fde[at]]
    loc[:len(adv_rows)] -= adv[adv_rows]

    state = _StateAt(m, copy, match_of_copy, fde_first, at, at_fde)
    w_cfa, v_cfa, w_off, v_off = _cfa_writers(ins, g, f)
    w_rbp, v_rbp, w_ra, v_ra = _register_writers(ins, g, f)
    cfa_reg = state.field(w_cfa, v_cfa, f.i_reg)
    cfa_off = state.field(w_off, v_off, f.i_off)
    rbp = state.field(w_rbp, v_rbp, f.i_rbp)
    ra = state.field(w_ra, v_ra, f.i_ra)
    seq = np.concatenate((adv_rows - fde_first[adv_rows], np.full(len(fin_rows), SEQ_LAST)))
    return at_fde, loc, cfa_reg, cfa_off, rbp, ra, seq, ev[last_op < 0]


def _matched_restores(ins: SliceInstructions, ev: np.ndarray, slow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DW_CFA_remember_state / restore_state: each restore matched to its remember (same FDE and
    level). Returns the restores (instruction indexes, sorted) and the remember each copies; FDEs
    with a restore of nothing are marked slow."""
    fde = ins.fde
    rem, rst = ins.of(C_REMEMBER), ins.of(C_RESTORE_STATE)
    rs = np.sort(np.concatenate((rem, rst)))
    if not len(rs):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    is_rem = np.isin(rs, rem, assume_unique=True)
    depth = np.cumsum(np.where(is_rem, 1, -1))
    f_rs = fde[rs]
    group_start = np.concatenate(([True], f_rs[1:] != f_rs[:-1]))
    base = np.maximum.accumulate(np.where(group_start, np.arange(len(rs)), 0))
    local = depth - (depth[base] - np.where(is_rem[base], 1, -1))
    bad = local < 0
    if bad.any():
        slow[ev[np.unique(f_rs[bad])]] = True
    level = np.where(is_rem, local, local + 1)
    order = np.lexsort((rs, level, f_rs))
    srt = rs[order]
    prev = np.concatenate(([-1], srt[:-1]))
    same = np.concatenate(([False], (f_rs[order][1:] == f_rs[order][:-1]) & (level[order][1:] == level[order][:-1])))
    ok = ~is_rem[order] & same & np.concatenate(([False], is_rem[order][:-1]))
    copy = np.sort(srt[ok])
    match_of_copy = prev[ok][np.argsort(srt[ok])]
    unmatched = ~is_rem[order] & ~ok
    if unmatched.any():
        slow[ev[np.unique(f_rs[order][unmatched])]] = True
    return copy, match_of_copy


def _cfa_writers(ins: SliceInstructions, g: np.ndarray, f: FdeColumns) -> tuple[list, list, list, list]:
    """The instructions that set the CFA register and those that set the CFA offset, each with
    the values they set: (writers of the register, values, writers of the offset, values)."""
    data_align = f.data_align
    w_cfa = [ins.of(C_DEF_CFA, C_DEF_CFA_SF, C_DEF_REG)]
    v_cfa = [ins.first(w_cfa[0], False)]
    w = ins.of(C_REGISTER, C_VAL_OFFSET)
    w = w[ins.reg_of(w) == f.ra_reg[g[w]]]                      # return address in a register: not ours to follow
    w_cfa.append(w)
    v_cfa.append(np.full(len(w), -1, np.int64))
    w_off, v_off = [], []
    for c, get in ((C_DEF_CFA, lambda w: ins.second(w, False)),
                   (C_DEF_CFA_SF, lambda w: ins.second(w, True) * data_align[g[w]]),
                   (C_DEF_OFF, lambda w: ins.first(w, False)),
                   (C_DEF_OFF_SF, lambda w: ins.first(w, True) * data_align[g[w]])):
        w = ins.of(c)
        w_off.append(w)
        v_off.append(get(w))
    return w_cfa, v_cfa, w_off, v_off


def _register_writers(ins: SliceInstructions, g: np.ndarray, f: FdeColumns) -> tuple[list, list, list, list]:
    """The instructions that set the rule of RBP and of the return address, each with the values
    they set: (writers of RBP's rule, values, writers of the return address's, values)."""
    data_align, arch = f.data_align, f.arch
    w_rbp, v_rbp, w_ra, v_ra = [], [], [], []
    for c, get in ((C_OFFSET, lambda w: ins.first(w, False) * data_align[g[w]]),
                   (C_OFF_EXT, lambda w: ins.second(w, False) * data_align[g[w]]),
                   (C_OFF_EXT_SF, lambda w: ins.second(w, True) * data_align[g[w]]),
                   (C_NEG_OFF, lambda w: -ins.second(w, False) * data_align[g[w]]),
                   (C_RESTORE, None), (C_UNDEFINED, None), (C_SAME, None)):
        w = ins.of(c)
        if not len(w):
            continue
        r = ins.reg_of(w)
        is_rbp = r == arch.fp
        is_ra = ~is_rbp & (r == f.ra_reg[g[w]])
        if get is not None:
            val = get(w)
            w_rbp.append(w[is_rbp]); v_rbp.append(val[is_rbp])
            w_ra.append(w[is_ra]); v_ra.append(val[is_ra])
        elif c == C_RESTORE:
            w_rbp.append(w[is_rbp]); v_rbp.append(f.i_rbp[g[w[is_rbp]]])
            w_ra.append(w[is_ra]); v_ra.append(f.i_ra[g[w[is_ra]]])
        elif c == C_UNDEFINED:
            w_rbp.append(w[is_rbp]); v_rbp.append(np.full(int(is_rbp.sum()), cfi.RBP_SAME, np.int64))
            w_ra.append(w[is_ra]); v_ra.append(np.full(int(is_ra.sum()), RA_UNDEFINED, np.int64))
        else:
            w_rbp.append(w[is_rbp]); v_rbp.append(np.full(int(is_rbp.sum()), cfi.RBP_SAME, np.int64))
            if arch is cfi.AARCH64:      # same_value(x30): the return address is in the link register
                w_ra.append(w[is_ra]); v_ra.append(np.full(int(is_ra.sum()), cfi.RA_SAME, np.int64))
    return w_rbp, v_rbp, w_ra, v_ra


class _StateAt:
    """A rule's value at each row (`at`: the row's instruction), from the rule's writers."""

    def __init__(self, m: int, copy: np.ndarray, match_of_copy: np.ndarray, fde_first: np.ndarray,
                 at: np.ndarray, at_fde: np.ndarray) -> None:
        self.m, self.copy, self.match_of_copy, self.fde_first = m, copy, match_of_copy, fde_first
        self.at, self.at_fde, self.at_first = at, at_fde, fde_first[at]
        self.copy_ord = np.full(m, -1, np.int64)
        self.copy_ord[copy] = np.arange(len(copy))

    def field(self, writers: list, values: list, default) -> np.ndarray:
        """The rule's value after instruction `at`: its last writer's, restore_state copies followed;
        `default` (per FDE): the CIE's initial rule."""
        m, copy, copy_ord, at = self.m, self.copy, self.copy_ord, self.at
        wi = np.concatenate(writers) if writers else np.zeros(0, np.int64)
        wv = np.concatenate(values) if values else np.zeros(0, np.int64)
        marker = np.full(m, -1, np.int32)
        marker[wi] = wi
        marker[copy] = copy
        last = np.maximum.accumulate(marker)
        val = np.zeros(m, np.int64)
        val[wi] = wv
        target = last[self.match_of_copy].astype(np.int64) if len(copy) else np.zeros(0, np.int64)
        target = np.where(target >= self.fde_first[copy], target, -1)
        for _ in range(64):
            k = np.where(target >= 0, copy_ord[np.maximum(target, 0)], -1)
            if not (k >= 0).any():
                break
            target = np.where(k >= 0, target[np.maximum(k, 0)], target)
        src = last[at].astype(np.int64)
        src[src < self.at_first] = -1
        if len(copy):
            k = np.where(src >= 0, copy_ord[np.maximum(src, 0)], -1)
            src = np.where(k >= 0, target[np.maximum(k, 0)], src)
        return np.where(src >= 0, val[np.maximum(src, 0)], default[self.at_fde])
