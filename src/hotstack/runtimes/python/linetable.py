"""Instruction offset -> source line, for each line-table format CPython has used.

- <= 3.9 `co_lnotab`: (byte delta u8, line delta s8) pairs; offsets in bytes.
- 3.10 `co_linetable` (PEP 626): (byte delta u8, line delta s8, -128 = no line) pairs.
- 3.11+ location table: entries of 1CCCCLLL (LLL+1 code units) with a code-specific tail.
`lasti` is passed in the unit the frame records: bytes for <= 3.9, code units (2 bytes) after.
A table cut short (the walker's copy of a long one, code.py) names only the instructions it covers.
"""

from __future__ import annotations


def _s8(b: int) -> int:
    return b - 256 if b >= 128 else b


def line_lnotab(table: bytes, firstlineno: int, lasti_bytes: int, complete: bool = True) -> int:
    line, addr = firstlineno, 0
    for i in range(0, len(table) - 1, 2):
        addr += table[i]
        if addr > lasti_bytes:
            break
        line += _s8(table[i + 1])
    else:
        if not complete:
            return 0
    return line


def line_310(table: bytes, firstlineno: int, lasti_units: int, complete: bool = True) -> int:
    if lasti_units < 0:
        return firstlineno
    target = lasti_units * 2
    line, addr = firstlineno, 0
    for i in range(0, len(table) - 1, 2):
        sdelta, ldelta = table[i], _s8(table[i + 1])
        end = addr + sdelta
        if ldelta != -128:
            line += ldelta
        if addr <= target < end:
            return line if ldelta != -128 else 0
        addr = end
    return line if complete else 0


def _varint(table: bytes, pos: int) -> tuple[int, int]:
    b = table[pos]
    pos += 1
    value, shift = b & 63, 0
    while b & 64:
        b = table[pos]
        pos += 1
        shift += 6
        value |= (b & 63) << shift
    return value, pos


def _svarint(table: bytes, pos: int) -> tuple[int, int]:
    value, pos = _varint(table, pos)
    return (-(value >> 1) if value & 1 else value >> 1), pos


def line_311(table: bytes, firstlineno: int, lasti_units: int, complete: bool = True) -> int:
    lasti_units = max(lasti_units, 0)
    line, addr, pos, n = firstlineno, 0, 0, len(table)
    try:
        while pos < n:
            first = table[pos]
            pos += 1
            code, length = (first >> 3) & 15, (first & 7) + 1
            has_line = True
            if code == 15:
                has_line = False
            elif code == 14:
                delta, pos = _svarint(table, pos)
                line += delta
                for _ in range(3):          # end line, column, end column
                    _, pos = _varint(table, pos)
            elif code == 13:
                delta, pos = _svarint(table, pos)
                line += delta
            elif code >= 10:
                line += code - 10
                pos += 2
            else:
                pos += 1
            end = addr + length
            if addr <= lasti_units < end:
                return line if has_line else 0
            addr = end
    except IndexError:          # a torn read: the line known so far is the best answer
        pass
    return line if complete else 0


def line_for(version: tuple[int, int], table: bytes, firstlineno: int, lasti: int, complete: bool = True) -> int:
    """The line of `lasti`; `complete` False: `table` is the first part of the code's table (a copy
    cut short), and an instruction past it has line 0 (not known), never the last line read."""
    if version >= (3, 11):
        return line_311(table, firstlineno, lasti, complete)
    if version == (3, 10):
        return line_310(table, firstlineno, lasti, complete)
    return line_lnotab(table, firstlineno, lasti, complete)
