"""The rows of a table build in compact columns: rule ids, the columns of parts joined.

A large library has millions of rows, all held until they are joined and sorted: that is the
builder's peak, so a row carries an int32 rule id (RuleIds) instead of its four rule values, and
the parts' columns are joined one at a time.
"""

from __future__ import annotations

import numpy as np

from .. import malloc
from . import cfi

# From this many rows on, join_columns gives freed pages back after each column (malloc_trim:
# ~0.3 ms a call, against the MBs it returns).
TRIM_ROWS = 1 << 16


def join_columns(parts: list, keys) -> list[np.ndarray]:
    """Column `k` of every part joined, for each k of `keys`, one column at a time, each part's
    column dropped (set to None) once joined; a single part's column is used as it is. A large
    library has millions of rows: holding the parts and all the joined columns side by side would
    double a table build's peak (libLLVM-15)."""
    out = []
    # The parts are small arrays spread over malloc's heap between each other: the pages that a
    # column's parts free are not reused by the next (larger) column and would stay resident. They
    # are given back after each column, so that a large library's join does not double its rows'
    # memory.
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


def compact_rows(rules: RuleIds, pc, kind, cfa, rbp, ra, fkey, seq) -> tuple[np.ndarray, ...]:
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
    for all the sections of a file's build. A row carries its rule's id (int32), not the four
    values (13 bytes): a large library's rows, all held until they are joined and sorted, are the
    builder's peak (libLLVM-14: 956k rows)."""

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
