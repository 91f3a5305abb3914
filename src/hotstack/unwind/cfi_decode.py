"""The CFA instructions of a slice of a section, decoded for every byte at once with numpy.

The length of an instruction that would start at each byte is computed for every byte at once
(a LEB128 ends by a reversed running minimum); a frontier walk from each FDE's first byte then
marks the real instruction starts. `SliceInstructions` holds them with their kinds (C_*) and reads
their operands.
"""

from __future__ import annotations

import numpy as np

from . import cfi

_SMALL_FRONTIER = 32                    # below this many active FDEs, walk the rest in Python

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
# 0x01 (set_loc, laid out as _LEN_BAD) and 0x0F (def_cfa_expression) are left to cfi.py (_luts).


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


class SliceInstructions:
    """The instructions of the FDEs whose instructions lie in data[lo:hi] (`ev_start`, `ev_end`:
    where each FDE's instructions start and end, relative to lo): their positions (`ops`), FDEs
    (`fde`, an index into the slice's FDEs), opcodes, kinds, and which are beyond the vectorized
    pass (`bad`: odd opcodes, or one that overruns its FDE)."""

    def __init__(self, data: bytes, lo: int, hi: int, ev_start: np.ndarray, ev_end: np.ndarray,
                 arch: cfi.Arch) -> None:
        s = self.s = np.frombuffer(data[lo:hi] + bytes(16), np.uint8)
        after, nxt = _next_positions(s)
        self.after = after
        n = len(s)
        # the end of the FDE each byte belongs to; a step past it goes to the sink (the last pad byte)
        end_of = np.zeros(n, np.int32)
        end_of[ev_start] = ev_end
        np.maximum.accumulate(end_of, out=end_of)
        ops = self.ops = _walk_starts(nxt, end_of, ev_start)
        self.fde = np.searchsorted(ev_start, ops, side="right") - 1      # index into the slice's FDEs
        self.m = len(ops)
        op = self.op = s[ops]
        self.q1 = ops + 1
        self.bad = _SLOWB[op] | (nxt[ops] > end_of[ops])                 # odd opcodes, or one that overruns
        if arch is not cfi.AARCH64:
            self.bad |= op == 0x2D                                       # arm64's negate_ra_state only
        cat = _CAT[op]
        self._by_cat = np.argsort(cat, kind="stable")
        self._bounds = np.concatenate(([0], np.cumsum(np.bincount(cat, minlength=_NCAT))))

    def of(self, *cats: int) -> np.ndarray:
        """Indexes (sorted) of the instructions of these kinds."""
        parts = [self._by_cat[self._bounds[c]:self._bounds[c + 1]] for c in cats]
        return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))

    def advances(self, code_align: np.ndarray) -> np.ndarray:
        """Per instruction, how far it advances the location (0 for all but advance_loc*);
        `code_align`: the CIE's code alignment factor of each instruction."""
        s, op, q1 = self.s, self.op, self.q1
        adv = np.zeros(self.m, np.int64)
        w = self.of(C_ADV)
        adv[w] = op[w] & 0x3F
        for c, width in ((C_ADV1, 1), (C_ADV2, 2), (C_ADV4, 4)):
            w = self.of(c)
            if len(w):
                v = np.zeros(len(w), np.int64)
                for k in range(width):
                    v |= s[q1[w] + k].astype(np.int64) << (8 * k)
                adv[w] = v
        adv *= code_align
        return adv

    def reg_of(self, w: np.ndarray) -> np.ndarray:
        """The register operand: in the opcode (DW_CFA_offset, DW_CFA_restore) or a LEB after it."""
        inline = self.op[w] >= 0x80
        return np.where(inline, (self.op[w] & 0x3F).astype(np.int64), _uleb_at(self.s, self.q1[w]))

    def first(self, w: np.ndarray, signed: bool) -> np.ndarray:
        """The first LEB128 operand of instructions `w`."""
        return _sleb_at(self.s, self.q1[w]) if signed else _uleb_at(self.s, self.q1[w])

    def second(self, w: np.ndarray, signed: bool) -> np.ndarray:
        """The second LEB128 operand of instructions `w` (after a LEB128 register)."""
        q2 = self.after[self.q1[w]]
        return _sleb_at(self.s, q2) if signed else _uleb_at(self.s, q2)


def _next_positions(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every byte p: the position after a LEB128 that would start at p, and after an
    instruction that would start at p."""
    n = len(s)
    pos = np.arange(n, dtype=np.int32)
    # after[p]: a reversed running minimum over the positions of bytes without the continuation bit
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
    return after, nxt


def _walk_starts(nxt: np.ndarray, end_of: np.ndarray, ev_start: np.ndarray) -> np.ndarray:
    """The positions where instructions start: a walk from each FDE's first instruction, all FDEs
    stepping together while many are left, the last few one by one."""
    n = len(nxt)
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
    return np.flatnonzero(mark)
