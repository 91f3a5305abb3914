"""Call frame information evaluated with numpy: every CFA instruction of a section at once.

cfi.py runs the DWARF CFA state machine one opcode at a time in Python; on libpython that
is ~0.5 s per file (bench/unwind_tables.py). Here the same machine is evaluated for all FDEs
together, with the same semantics (tests/unwind/test_fast_tables.py compares both builders
row for row):

1. Headers: one pass over the records gives, per FDE, its CIE, pc range and instruction
   bytes (.eh_frame_hdr's sorted table is not needed: the records are walked in order).
2. A stream: each FDE's CIE initial instructions followed by its own, concatenated.
3. Instruction boundaries: the length of an instruction that would start at each byte is
   computed for every byte at once (LEB128 ends by a reversed running minimum); a frontier
   walk from each FDE's first byte then marks the real instruction starts.
4. State: each rule (CFA register, CFA offset, rule kind, saved RBP, return address) is
   "the last instruction that wrote it" (a running maximum of writer indexes). DW_CFA_restore
   and DW_CFA_restore_state are writers that copy another writer's value; those copies are
   resolved by pointer jumping, so a remember/restore pair costs nothing extra.
5. A row is emitted at every advance_loc with the state at that point, plus the final state
   and an end row, exactly as cfi.parse does.

FDEs that use what the vectorized pass does not model (DW_CFA_set_loc, CFA expressions such
as the PLT's, restore_state without remember_state, malformed bytes) go through cfi.py's
per-FDE evaluator instead: a handful per file.
"""

from __future__ import annotations

import struct

import numpy as np

from .. import malloc
from ..symbols.elf import eh_frame_hdr_table
from . import cfi

RA_UNDEFINED = np.int64(-(1 << 40))     # the return address rule is "undefined": outermost frame
_SMALL_FRONTIER = 32                    # below this many active FDEs, walk the rest in Python
# FDEs are evaluated in slices of about this many bytes of instructions: every array is per byte or
# per instruction of the slice, ~115 bytes of them per byte of section, so the whole .eh_frame of
# a large library at once (libLLVM: 5.2 MB) peaked at 600 MB; slices of 256 KiB bound that to
# ~30 MB, of 64 KiB to ~7 MB, for the same CPU (bench/table_memory.py, bench/RESULTS.md: numpy's
# OpenBLAS, 354k rows from hand-written assembly, peaked +51 MB over the opened file with 256 KiB).
CHUNK_BYTES = 64 << 10

# From this many rows on, join_columns gives freed pages back after each column (malloc_trim:
# ~0.3 ms a call, against the MBs it returns).
TRIM_ROWS = 1 << 16

# Per low opcode (op < 0x40): how its operands are laid out.
_LEN_ONE, _LEN_FIXED, _LEN_LEB, _LEN_LEB2, _LEN_EXPR, _LEN_REG_EXPR, _LEN_BAD = range(7)
_LAYOUT = np.full(64, _LEN_BAD, np.int8)
_FIXED = np.zeros(64, np.int64)
for _op in (0x00, 0x0A, 0x0B, 0x2D):      # 0x2D: AARCH64_negate_ra_state
    _LAYOUT[_op] = _LEN_ONE
for _op, _n in ((0x02, 2), (0x03, 3), (0x04, 5)):
    _LAYOUT[_op], _FIXED[_op] = _LEN_FIXED, _n
for _op in (0x06, 0x07, 0x08, 0x0D, 0x0E, 0x13, 0x2E):
    _LAYOUT[_op] = _LEN_LEB
for _op in (0x05, 0x09, 0x0C, 0x11, 0x12, 0x14, 0x15, 0x2F):
    _LAYOUT[_op] = _LEN_LEB2
_LAYOUT[0x0F] = _LEN_EXPR
_LAYOUT[0x10] = _LAYOUT[0x16] = _LEN_REG_EXPR
# 0x01 (set_loc) and 0x0F (def_cfa_expression) are left to cfi.py.
_SLOW_OPS = np.zeros(64, bool)
_SLOW_OPS[[0x01, 0x0F]] = True


class Fdes:
    """The FDEs of one section, as arrays (one element per FDE, in section order)."""

    def __init__(self) -> None:
        self.offset: list[int] = []      # record start in the section
        self.cie: list[int] = []         # index into `cies`
        self.pc_begin: list[int] = []
        self.pc_range: list[int] = []
        self.ins_start: list[int] = []
        self.ins_end: list[int] = []
        self.cies: list[cfi._Cie] = []
        self.cie_offsets: list[int] = []


def _headers(data: bytes, section_addr: int, debug_frame: bool, arch: cfi.Arch = cfi.X86_64) -> Fdes:
    """One pass over the records: CIEs parsed (few), FDE headers decoded."""
    out = Fdes()
    cie_index: dict[int, int] = {}
    u64 = cfi._U64.unpack_from
    size = len(data)
    for start, pos, end, cie_at in cfi.records(data, debug_frame):
        try:
            if cie_at is None:
                if start not in cie_index:
                    cie_index[start] = len(out.cies)
                    out.cies.append(cfi._parse_cie(data, pos, end, section_addr, debug_frame, arch))
                    out.cie_offsets.append(start)
            else:
                c = cie_index.get(cie_at)
                if c is None:
                    if cie_at >= size:
                        continue
                    c = cie_index[cie_at] = len(out.cies)
                    out.cies.append(cfi._parse_cie(data, cfi._cie_body(data, cie_at), cfi._entry_end(data, cie_at),
                                                   section_addr, debug_frame, arch))
                    out.cie_offsets.append(cie_at)
                cie = out.cies[c]
                if debug_frame:
                    pc_begin, p = u64(data, pos)[0], pos + 8
                    pc_range, p = u64(data, p)[0], p + 8
                elif cie.fde_enc == 0x1B:            # pcrel sdata4: what every linker emits
                    pc_begin = (section_addr + pos + struct.unpack_from("<i", data, pos)[0]) & 0xFFFFFFFFFFFFFFFF
                    pc_range, p = struct.unpack_from("<i", data, pos + 4)[0], pos + 8
                else:
                    pc_begin, p = cfi._encoded(data, pos, cie.fde_enc, section_addr)
                    pc_range, p = cfi._encoded(data, p, cie.fde_enc & 0x0F, 0)
                if cie.has_aug_data:
                    aug = data[p]
                    if aug < 0x80:
                        p += 1 + aug
                    else:
                        aug, p = cfi._uleb(data, p)
                        p += aug
                out.offset.append(start)
                out.cie.append(c)
                out.pc_begin.append(pc_begin)
                out.pc_range.append(pc_range)
                out.ins_start.append(p)
                out.ins_end.append(end)
        except (cfi.CfiError, IndexError, struct.error, ValueError):
            pass
    return out


def _uleb_at(s: np.ndarray, q: np.ndarray, width: int = 5) -> np.ndarray:
    """Unsigned LEB128 values starting at positions q (up to `width` bytes)."""
    first = s[q]
    longer = np.flatnonzero(first >= 0x80)
    value = first.astype(np.int64)
    if len(longer):
        value[longer] = _uleb_slow(s, q[longer], width)
    return value


def _uleb_slow(s: np.ndarray, q: np.ndarray, width: int) -> np.ndarray:
    value = np.zeros(len(q), np.int64)
    going = np.ones(len(q), bool)
    for k in range(width):
        b = s[q + k].astype(np.int64)
        value |= np.where(going, (b & 0x7F) << (7 * k), 0)
        going &= b >= 0x80
        if not going.any():
            break
    return value


def _sleb_at(s: np.ndarray, q: np.ndarray, width: int = 5) -> np.ndarray:
    first = s[q]
    longer = np.flatnonzero(first >= 0x80)
    value = first.astype(np.int64)
    value = np.where(value >= 0x40, value - 0x80, value)
    if len(longer):
        value[longer] = _sleb_slow(s, q[longer], width)
    return value


def _sleb_slow(s: np.ndarray, q: np.ndarray, width: int) -> np.ndarray:
    value = np.zeros(len(q), np.int64)
    shift = np.zeros(len(q), np.int64)
    going = np.ones(len(q), bool)
    last = np.zeros(len(q), np.int64)
    for k in range(width):
        b = s[q + k].astype(np.int64)
        value |= np.where(going, (b & 0x7F) << (7 * k), 0)
        last = np.where(going, b, last)
        shift = np.where(going, 7 * (k + 1), shift)
        going &= b >= 0x80
        if not going.any():
            break
    negative = (last & 0x40) != 0
    return np.where(negative, value - (np.int64(1) << shift), value)


def _luts():
    """Per opcode byte: instruction length without LEB operands, number of LEB operands, slow."""
    fixed = np.ones(256, np.int32)  # int32: positions are int32 (sections < 2 GiB)
    lebs = np.zeros(256, np.int32)
    slow = np.zeros(256, bool)
    for b in range(256):
        hi, lo = b >> 6, b & 0x3F
        if hi == 2:
            lebs[b] = 1
        elif hi == 0:
            lay = _LAYOUT[lo]
            if lay == _LEN_FIXED:
                fixed[b] = _FIXED[lo]
            elif lay == _LEN_LEB:
                lebs[b] = 1
            elif lay == _LEN_LEB2:
                lebs[b] = 2
            elif lay != _LEN_ONE:
                slow[b] = True          # expressions, set_loc, unknown opcodes: cfi.py
    return fixed, lebs, slow


_FIXLEN, _NLEBS, _SLOWB = _luts()

# Kinds of instruction, by opcode byte (what the state pass needs to tell apart).
(C_IGNORE, C_ADV, C_ADV1, C_ADV2, C_ADV4, C_OFFSET, C_RESTORE, C_OFF_EXT, C_OFF_EXT_SF, C_NEG_OFF, C_UNDEFINED,
 C_SAME, C_REGISTER, C_VAL_OFFSET, C_REMEMBER, C_RESTORE_STATE, C_DEF_CFA, C_DEF_CFA_SF, C_DEF_REG, C_DEF_OFF,
 C_DEF_OFF_SF, _NCAT) = range(22)
_CAT = np.zeros(256, np.uint8)
_CAT[0x40:0x80], _CAT[0x80:0xC0], _CAT[0xC0:] = C_ADV, C_OFFSET, C_RESTORE
for _op, _c in ((0x02, C_ADV1), (0x03, C_ADV2), (0x04, C_ADV4), (0x05, C_OFF_EXT), (0x06, C_RESTORE),
                (0x07, C_UNDEFINED), (0x08, C_SAME), (0x09, C_REGISTER), (0x0A, C_REMEMBER), (0x0B, C_RESTORE_STATE),
                (0x0C, C_DEF_CFA), (0x0D, C_DEF_REG), (0x0E, C_DEF_OFF), (0x11, C_OFF_EXT_SF), (0x12, C_DEF_CFA_SF),
                (0x13, C_DEF_OFF_SF), (0x14, C_VAL_OFFSET), (0x15, C_VAL_OFFSET), (0x2F, C_NEG_OFF)):
    _CAT[_op] = _c
_NLEBS = _NLEBS.astype(np.int8)


class _Headers:
    """FDE headers as arrays, in section order."""

    def __init__(self, offset, cie, pc_begin, pc_range, ins_start, ins_end, cies, cie_offsets) -> None:
        self.offset, self.cie, self.pc_begin, self.pc_range = offset, cie, pc_begin, pc_range
        self.ins_start, self.ins_end, self.cies, self.cie_offsets = ins_start, ins_end, cies, cie_offsets


def _headers_arrays(data: bytes, section_addr: int, debug_frame: bool, arch: cfi.Arch = cfi.X86_64) -> _Headers:
    h = _headers(data, section_addr, debug_frame, arch)
    a = lambda v: np.array(v, np.int64)
    return _Headers(a(h.offset), a(h.cie), np.array(h.pc_begin, np.uint64).astype(np.int64), a(h.pc_range),
                    a(h.ins_start), a(h.ins_end), h.cies, h.cie_offsets)


def _u32_at(b: np.ndarray, o: np.ndarray) -> np.ndarray:
    return (b[o].astype(np.int64) | (b[o + 1].astype(np.int64) << 8) | (b[o + 2].astype(np.int64) << 16)
            | (b[o + 3].astype(np.int64) << 24))


def _s32_at(b: np.ndarray, o: np.ndarray) -> np.ndarray:
    v = _u32_at(b, o)
    return np.where(v >= 1 << 31, v - (1 << 32), v)


def _headers_from_hdr(data: bytes, section_addr: int, hdr: bytes, hdr_addr: int,
                      arch: cfi.Arch = cfi.X86_64) -> _Headers | None:
    """FDE headers through .eh_frame_hdr's table (vectorized); None if the layout is not the usual one
    (then the records are walked instead)."""
    table = eh_frame_hdr_table(hdr)
    if table is None:
        return None
    offset = np.sort(hdr_addr + table[:, 1].astype(np.int64) - section_addr)
    size = len(data)
    if offset[0] < 0 or offset[-1] + 17 > size:
        return None
    b = np.frombuffer(data + bytes(8), np.uint8)
    length = _u32_at(b, offset)
    if (length == 0xFFFFFFFF).any() or (offset + 4 + length > size).any():
        return None
    cie_at = offset + 4 - _u32_at(b, offset + 4)
    uniq, cie = np.unique(cie_at, return_inverse=True)
    cies = []
    for at in uniq.tolist():
        if at < 0 or at + 8 > size or struct.unpack_from("<I", data, at + 4)[0] != 0:
            return None
        try:
            c = cfi._parse_cie(data, cfi._cie_body(data, at), cfi._entry_end(data, at), section_addr, False, arch)
        except (cfi.CfiError, IndexError, struct.error, ValueError):
            return None
        if c.fde_enc != 0x1B or not c.has_aug_data:
            return None
        cies.append(c)
    aug = b[offset + 16].astype(np.int64)
    if (aug >= 0x80).any():
        return None
    pc_begin = section_addr + offset + 8 + _s32_at(b, offset + 8)
    pc_range = _s32_at(b, offset + 12)
    return _Headers(offset, cie.astype(np.int64), pc_begin, pc_range, offset + 17 + aug, offset + 4 + length,
                    cies, uniq.tolist())


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
    h = _headers_from_hdr(data, section_addr, hdr, hdr_addr, arch) if hdr and not debug_frame else None
    if h is None:
        h = _headers_arrays(data, section_addr, debug_frame, arch)
    nf = len(h.offset)
    if nf == 0:
        return {k: np.zeros(0, np.int64) for k in ("pc", "rule", "order")}, 0, 0
    rules = RuleIds() if rules is None else rules
    # the CIEs' initial states (few): evaluated by cfi.py
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
    i_reg, i_off, i_rbp, i_ra, code_align, data_align, ra_reg = (_ByCie(ci[:, k], h.cie) for k in (0, 1, 2, 3, 5, 6, 7))
    cie_ok, signal = ci[h.cie, 4] != 0, ci[h.cie, 8] != 0
    pc_begin, pc_range, ins_start, ins_end = h.pc_begin, h.pc_range, h.ins_start, h.ins_end

    valid = (pc_begin != 0) & (pc_range != 0) & (ins_end >= ins_start)
    slow = valid & ~signal & ~cie_ok
    evaluate = valid & ~signal & cie_ok
    del cie_ok

    def evaluate_chunk(ev: np.ndarray) -> tuple[np.ndarray, ...]:
        """Rows of the FDEs `ev` (indexes, by section order) whose instructions lie together in one
        slice of the section: the per-byte and per-instruction arrays are sized by the slice."""
        lo, hi = int(ins_start[ev[0]]), int(ins_end[ev[-1]])
        # -- instruction boundaries, for every byte of the section at once ---------------------------------
        s = np.frombuffer(data[lo:hi] + bytes(16), np.uint8)
        n = len(s)
        pos = np.arange(n, dtype=np.int32)
        # after[p]: the position after the LEB128 that starts at p (a reversed running minimum over the
        # positions of bytes without the continuation bit)
        after = pos + 1
        longer = np.flatnonzero(s >= 0x80)                 # few: most LEBs are one byte
        if len(longer):
            ends = np.flatnonzero(s < 0x80)
            after[longer] = ends[np.minimum(np.searchsorted(ends, longer), len(ends) - 1)] + 1
        np.minimum(after, n - 1, out=after)
        e1 = np.empty(n, np.int32)
        e1[:-1] = after[1:]
        e1[-1] = n - 1
        nlebs = _NLEBS[s]
        nxt = pos + _FIXLEN[s]
        one = np.flatnonzero(nlebs)
        nxt[one] = e1[one]
        two = one[nlebs[one] == 2]
        nxt[two] = after[e1[two]]

        ev_start, ev_end = ins_start[ev] - lo, ins_end[ev] - lo
        # the end of the FDE each byte belongs to; a step past it goes to the sink (the last pad byte)
        end_of = np.zeros(n, np.int32)
        end_of[ev_start] = ev_end
        np.maximum.accumulate(end_of, out=end_of)
        sink = n - 1
        step = nxt.copy()
        step[nxt >= end_of] = sink
        step[sink] = sink
        mark = np.zeros(n, bool)
        cur = ev_start
        while len(cur) > _SMALL_FRONTIER:
            for _ in range(8):
                mark[cur] = True
                cur = step[cur]
            cur = cur[cur != sink]
        for c in cur.tolist():
            while c != sink:
                mark[c] = True
                c = int(step[c])
        mark[sink] = False
        ops = np.flatnonzero(mark)
        fde = np.searchsorted(ev_start, ops, side="right") - 1      # index into ev
        m = len(ops)
        op = s[ops]
        bad_ops = _SLOWB[op] | (nxt[ops] > end_of[ops])              # odd opcodes, or one that overruns
        if arch is not cfi.AARCH64:
            bad_ops |= op == 0x2D                                    # arm64's negate_ra_state only
        if bad_ops.any():
            slow[ev[np.unique(fde[bad_ops])]] = True

        # -- operands, by kind of instruction ----------------------------------------------------------------
        g = ev[fde]                                      # FDE (index into the header arrays) of each instruction
        cat = _CAT[op]
        by_cat = np.argsort(cat, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(cat, minlength=_NCAT))))

        def of(*cats: int) -> np.ndarray:
            """Indexes (sorted) of the instructions of these kinds."""
            parts = [by_cat[bounds[c]:bounds[c + 1]] for c in cats]
            return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))

        q1 = ops + 1
        adv = np.zeros(m, np.int64)
        w = of(C_ADV)
        adv[w] = op[w] & 0x3F
        for c, width in ((C_ADV1, 1), (C_ADV2, 2), (C_ADV4, 4)):
            w = of(c)
            if len(w):
                v = np.zeros(len(w), np.int64)
                for k in range(width):
                    v |= s[q1[w] + k].astype(np.int64) << (8 * k)
                adv[w] = v
        adv *= code_align[g]

        def reg_of(w: np.ndarray) -> np.ndarray:
            """The register operand: in the opcode (DW_CFA_offset, DW_CFA_restore) or a LEB after it."""
            inline = op[w] >= 0x80
            return np.where(inline, (op[w] & 0x3F).astype(np.int64), _uleb_at(s, q1[w]))

        def second(w: np.ndarray, signed: bool) -> np.ndarray:
            q2 = after[q1[w]]
            return _sleb_at(s, q2) if signed else _uleb_at(s, q2)

        # DW_CFA_remember_state / restore_state: each restore matched to its remember (same FDE and level)
        rem, rst = of(C_REMEMBER), of(C_RESTORE_STATE)
        rs = np.sort(np.concatenate((rem, rst)))
        copy = np.zeros(0, np.int64)
        match_of_copy = np.zeros(0, np.int64)
        if len(rs):
            is_rem = np.isin(rs, rem, assume_unique=True)
            depth = np.cumsum(np.where(is_rem, 1, -1))
            f_rs = fde[rs]
            group_start = np.concatenate(([True], f_rs[1:] != f_rs[:-1]))
            base = np.where(group_start, depth - np.where(is_rem, 1, -1), 0)
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
        copy_ord = np.full(m, -1, np.int64)
        copy_ord[copy] = np.arange(len(copy))
        first_op = np.searchsorted(fde, np.arange(len(ev)))
        fde_first = first_op[fde]

        # writers of each rule: (instruction indexes, values)
        w_cfa = [of(C_DEF_CFA, C_DEF_CFA_SF, C_DEF_REG)]
        v_cfa = [_uleb_at(s, q1[w_cfa[0]])]
        w = of(C_REGISTER, C_VAL_OFFSET)
        w = w[reg_of(w) == ra_reg[g[w]]]                      # return address in a register: not ours to follow
        w_cfa.append(w)
        v_cfa.append(np.full(len(w), -1, np.int64))
        w_off, v_off = [], []
        for c, get in ((C_DEF_CFA, lambda w: second(w, False)), (C_DEF_CFA_SF, lambda w: second(w, True) * data_align[g[w]]),
                       (C_DEF_OFF, lambda w: _uleb_at(s, q1[w])), (C_DEF_OFF_SF, lambda w: _sleb_at(s, q1[w]) * data_align[g[w]])):
            w = of(c)
            w_off.append(w)
            v_off.append(get(w))
        w_rbp, v_rbp, w_ra, v_ra = [], [], [], []
        for c, get in ((C_OFFSET, lambda w: _uleb_at(s, q1[w]) * data_align[g[w]]),
                       (C_OFF_EXT, lambda w: second(w, False) * data_align[g[w]]),
                       (C_OFF_EXT_SF, lambda w: second(w, True) * data_align[g[w]]),
                       (C_NEG_OFF, lambda w: -second(w, False) * data_align[g[w]]),
                       (C_RESTORE, None), (C_UNDEFINED, None), (C_SAME, None)):
            w = of(c)
            if not len(w):
                continue
            r = reg_of(w)
            is_rbp = r == arch.fp
            is_ra = ~is_rbp & (r == ra_reg[g[w]])
            if get is not None:
                val = get(w)
                w_rbp.append(w[is_rbp]); v_rbp.append(val[is_rbp])
                w_ra.append(w[is_ra]); v_ra.append(val[is_ra])
            elif c == C_RESTORE:
                w_rbp.append(w[is_rbp]); v_rbp.append(i_rbp[g[w[is_rbp]]])
                w_ra.append(w[is_ra]); v_ra.append(i_ra[g[w[is_ra]]])
            elif c == C_UNDEFINED:
                w_rbp.append(w[is_rbp]); v_rbp.append(np.full(int(is_rbp.sum()), cfi.RBP_SAME, np.int64))
                w_ra.append(w[is_ra]); v_ra.append(np.full(int(is_ra.sum()), RA_UNDEFINED, np.int64))
            else:
                w_rbp.append(w[is_rbp]); v_rbp.append(np.full(int(is_rbp.sum()), cfi.RBP_SAME, np.int64))
                if arch is cfi.AARCH64:      # same_value(x30): the return address is in the link register
                    w_ra.append(w[is_ra]); v_ra.append(np.full(int(is_ra.sum()), cfi.RA_SAME, np.int64))

        # rows: at every advance (state before it, at the location before it) and after the last instruction
        cum = np.cumsum(adv)
        adv_base = np.where(first_op > 0, cum[np.maximum(first_op - 1, 0)], 0)
        adv_rows = of(C_ADV, C_ADV1, C_ADV2, C_ADV4)
        last_op = np.full(len(ev), -1, np.int64)
        last_op[fde] = np.arange(m)
        fin_rows = last_op[last_op >= 0]
        at = np.concatenate((adv_rows, fin_rows))
        at_fde = g[at]
        loc = pc_begin[at_fde] + cum[at] - adv_base[fde[at]]
        loc[:len(adv_rows)] -= adv[adv_rows]
        at_first = fde_first[at]

        def field(writers: list, values: list, default: np.ndarray) -> np.ndarray:
            """The rule's value after instruction `at`: its last writer's, restore_state copies followed."""
            wi = np.concatenate(writers) if writers else np.zeros(0, np.int64)
            wv = np.concatenate(values) if values else np.zeros(0, np.int64)
            marker = np.full(m, -1, np.int32)
            marker[wi] = wi
            marker[copy] = copy
            last = np.maximum.accumulate(marker)
            val = np.zeros(m, np.int64)
            val[wi] = wv
            target = last[match_of_copy].astype(np.int64) if len(copy) else np.zeros(0, np.int64)
            target = np.where(target >= fde_first[copy], target, -1)
            for _ in range(64):
                k = np.where(target >= 0, copy_ord[np.maximum(target, 0)], -1)
                if not (k >= 0).any():
                    break
                target = np.where(k >= 0, target[np.maximum(k, 0)], target)
            src = last[at].astype(np.int64)
            src[src < at_first] = -1
            if len(copy):
                k = np.where(src >= 0, copy_ord[np.maximum(src, 0)], -1)
                src = np.where(k >= 0, target[np.maximum(k, 0)], src)
            return np.where(src >= 0, val[np.maximum(src, 0)], default[at_fde])

        cfa_reg = field(w_cfa, v_cfa, i_reg)
        cfa_off = field(w_off, v_off, i_off)
        rbp = field(w_rbp, v_rbp, i_rbp)
        ra = field(w_ra, v_ra, i_ra)
        seq = np.concatenate((adv_rows - fde_first[adv_rows], np.full(len(fin_rows), SEQ_LAST)))
        return at_fde, loc, cfa_reg, cfa_off, rbp, ra, seq, ev[last_op < 0]

    ev_all = np.flatnonzero(evaluate & (ins_end > ins_start))
    parts: list[tuple] = []
    fp: set[int] = set()

    def add_rule_rows(row_fde, loc, cfa_reg, cfa_off, rbp, ra, seq) -> None:
        """Keep the rows of FDEs that stay on the fast path, in the compact columns of `_part`."""
        kind = np.where(cfa_reg == arch.sp, cfi.KIND_CFA_SP,
                        np.where(cfa_reg == arch.fp, cfi.KIND_CFA_FP, cfi.KIND_INVALID))
        kind = np.where(ra == RA_UNDEFINED, cfi.KIND_STOP, kind)
        keep = ~slow[row_fde]
        row_fde, kind = row_fde[keep], kind[keep]
        parts.append(_part(rules, loc[keep], kind, cfa_off[keep], rbp[keep], ra[keep], h.offset[row_fde], seq[keep]))
        fp.update(np.unique(row_fde[kind == cfi.KIND_CFA_FP]).tolist())

    no_ops = []
    for ev in _chunks(ev_all, ins_start, CHUNK_BYTES):
        *rows, no_ops_here = evaluate_chunk(ev)
        add_rule_rows(*rows)
        no_ops.append(no_ops_here)
    # evaluated FDEs without any instruction: their CIE's initial state
    bare = np.concatenate([np.flatnonzero(evaluate & (ins_end == ins_start))] + no_ops)
    add_rule_rows(bare, pc_begin[bare], i_reg[bare], i_off[bare], i_rbp[bare], i_ra[bare],
                  np.full(len(bare), SEQ_LAST))

    sig = np.flatnonzero(valid & signal)
    zero = np.zeros(len(sig), np.int64)
    parts.append(_part(rules, pc_begin[sig], np.full(len(sig), cfi.KIND_SIGNAL), zero, zero, zero, h.offset[sig], zero))
    ends = np.flatnonzero(valid & ~slow)
    zero = np.zeros(len(ends), np.int64)
    parts.append(_part(rules, pc_begin[ends] + pc_range[ends], np.full(len(ends), cfi.KIND_END), zero, zero, zero,
                       h.offset[ends], np.full(len(ends), SEQ_LAST + 1)))
    # the FDEs left to cfi.py's evaluator, one by one
    slow_rows: list[tuple] = []
    slow_keys: list[tuple[int, int]] = []
    states: dict = {}
    for i in np.flatnonzero(slow).tolist():
        cie = h.cies[int(h.cie[i])]
        before = len(slow_rows)
        start = int(h.offset[i])
        try:
            cfi._fde(data, _header_end(data, start), int(ins_end[i]), cie, h.cie_offsets[int(h.cie[i])], states,
                     section_addr, debug_frame, slow_rows)
        except (cfi.CfiError, IndexError, struct.error, ValueError):
            pass
        if any(r[1] == cfi.KIND_CFA_FP for r in slow_rows[before:]):
            fp.add(i)
        slow_keys.extend((start, j) for j in range(len(slow_rows) - before))
    if slow_rows:
        arr = np.array(slow_rows, np.int64)
        keys = np.array(slow_keys, np.int64)
        parts.append(_part(rules, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], keys[:, 0], keys[:, 1]))
        del arr, keys
    # the FDEs' own arrays (a dozen per FDE; ~4 MB for a library of 30k FDEs) go before the rows
    # are joined and sorted, the build's peak
    del h, ci, i_reg, i_off, i_rbp, i_ra, code_align, data_align, ra_reg, signal
    del pc_begin, pc_range, ins_start, ins_end, valid, slow, evaluate, ev_all, bare, sig, ends, zero
    del slow_rows, slow_keys, states
    columns = [list(p) for p in parts]
    del parts
    pc, rule, fkey, seq = join_columns(columns, range(4))
    del columns
    order = np.lexsort((seq, fkey))
    del seq, fkey
    rank = np.empty(len(order), np.int32 if len(order) < 1 << 31 else np.int64)
    rank[order] = np.arange(len(order), dtype=rank.dtype)
    del order
    return {"pc": pc, "rule": rule, "order": rank}, nf, len(fp)


def join_columns(parts: list, keys) -> list[np.ndarray]:
    """Column `k` of every part joined, for each k of `keys`, one column at a time, each part's
    column dropped (set to None) once joined; a single part's column is used as it is. A large
    library has millions of rows: the parts and the whole columns side by side doubled a table
    build's peak (libLLVM-15)."""
    out = []
    # The parts are small arrays spread over malloc's heap between each other: the pages that a
    # column's parts free are not reused by the next (larger) column, and stayed resident; given
    # back after each column, a large library's join no longer doubles its rows' memory.
    keys = list(keys)
    trim = len(parts) > 1 and bool(keys) and sum(len(p[keys[0]]) for p in parts) >= TRIM_ROWS
    for k in keys:
        out.append(parts[0][k] if len(parts) == 1 else np.concatenate([p[k] for p in parts]))
        for p in parts:
            p[k] = None
        if trim:
            malloc.trim()
    return out


_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


# A row's place in its FDE (`seq`) for the rows after every instruction's: the final state, then
# the FDE's end. An FDE has fewer rows than its bytes of instructions (a section is read up to
# 256 MB): the int32 column holds them.
SEQ_LAST = 1 << 30


def _part(rules: RuleIds, pc, kind, cfa, rbp, ra, fkey, seq) -> tuple[np.ndarray, ...]:
    """Rows in compact columns (a large library has millions): pc int64, rule id (RuleIds) int32, FDE
    offset (in a section of at most 256 MB) and place in the FDE int32. Non-rule rows carry zeros
    (as cfi.py's row tuples do). An offset beyond int32 is clipped, still out of the range the
    kernel rules accept (kernel_tables.kernel_rules), and never onto RBP_SAME."""
    kind = np.asarray(kind, np.int8)
    plain = (kind == cfi.KIND_CFA_SP) | (kind == cfi.KIND_CFA_FP) | (kind == cfi.KIND_PLT)
    rbp = np.where(rbp == cfi.RBP_SAME, cfi.RBP_SAME, np.clip(rbp, _I32_MIN, _I32_MAX - 1))
    rule = rules.ids(kind, np.where(plain, np.clip(cfa, _I32_MIN, _I32_MAX), 0).astype(np.int32),
                     np.where(plain, rbp, 0).astype(np.int32),
                     np.where(plain, np.clip(ra, _I32_MIN, _I32_MAX), 0).astype(np.int32))
    return np.asarray(pc, np.int64), rule, np.asarray(fkey, np.int32), np.asarray(seq, np.int32)


_MIX = np.int64(-7046029254386353131)      # (2**64 / golden ratio, as int64: spreads key1's bits)


class RuleIds:
    """Ids of rules (kind, CFA offset, RBP rule, return-address rule), numbered as they are met; one
    for all the sections of a file's build. A row carries its rule's id (int32) where it had carried
    the four values (13 bytes): a large library's rows, all held until they are joined and sorted,
    are the builder's peak (libLLVM-14: 956k rows)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, int, int, int], int] = {}
        self.rules: list[tuple[int, int, int, int]] = []

    def ids(self, kind: np.ndarray, cfa: np.ndarray, rbp: np.ndarray, ra: np.ndarray) -> np.ndarray:
        """The id of each row's rule (int32 arrays of the offsets, kind int8), new rules numbered."""
        if not len(kind):
            return np.zeros(0, np.int32)
        key1, key2 = rule_keys(kind, cfa, rbp, ra)
        # the rows' distinct rules by one sort of a 64-bit mix of both keys (a part has a few hundred
        # rules in thousands of rows), each row then checked against its rule's keys: a mix shared by
        # two rules (never seen) falls back to sorting both keys
        mixed = key1 * _MIX ^ key2
        uniq, inverse = np.unique(mixed, return_inverse=True)
        inverse = inverse.reshape(-1)
        first = np.empty(len(uniq), np.int64)        # a row of each (any: their keys are checked)
        first[inverse] = np.arange(len(inverse))
        if not ((key1[first][inverse] == key1) & (key2[first][inverse] == key2)).all():
            order = np.lexsort((key2, key1))
            new = np.ones(len(order), bool)
            new[1:] = (key1[order][1:] != key1[order][:-1]) | (key2[order][1:] != key2[order][:-1])
            first = order[new]
            inverse = np.empty(len(order), np.int64)
            inverse[order] = np.cumsum(new) - 1
        found = np.array(list(map(self.id_of, zip(kind[first].tolist(), cfa[first].tolist(), rbp[first].tolist(),
                                                  ra[first].tolist()))), np.int32)
        return found[inverse.reshape(-1)]

    def id_of(self, rule: tuple[int, int, int, int]) -> int:
        """The rule's id (numbered now if it is new)."""
        at = self._ids.get(rule)
        if at is None:
            at = self._ids[rule] = len(self.rules)
            self.rules.append(rule)
        return at


def rule_keys(kind: np.ndarray, cfa: np.ndarray, rbp: np.ndarray, ra: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two int64 keys that together tell rules apart (the offsets are int32): (kind, CFA) and
    (RBP, return address)."""
    key1 = (kind.astype(np.int64) << 40) ^ (cfa.astype(np.int64) & 0xFFFFFFFFFF)
    key2 = (rbp.astype(np.int64) << 32) ^ (ra.astype(np.int64) & 0xFFFFFFFF)
    return key1, key2


class _ByCie:
    """A CIE's value for FDEs, indexed like a per-FDE column (FDE indexes -> their CIE's values)
    without a per-FDE copy: nine int64 columns for every FDE of a library (libLLVM-14: 95k FDEs,
    ~7 MB) had been held through the whole build."""

    __slots__ = ("values", "cie")

    def __init__(self, values: np.ndarray, cie: np.ndarray) -> None:
        self.values, self.cie = values, cie

    def __getitem__(self, fdes):
        return self.values[self.cie[fdes]]


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


def _header_end(data: bytes, start: int) -> int:
    """Where the FDE's pc_begin field starts (what cfi._fde expects)."""
    length = cfi._U32.unpack_from(data, start)[0]
    return start + (20 if length == 0xFFFFFFFF else 8)
