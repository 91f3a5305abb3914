"""A C struct as Python reads it: named fields over a struct.Struct laid out as C lays it out.

bpf/schema.py (generated) holds one Record per struct of bpf/schema.yaml. Readers use field
names (`rec.pid`), never positions, so a field added to the schema reaches them without edits.
"""

from __future__ import annotations

import struct
from collections import namedtuple


class Record:
    """`format` is a little-endian struct format with C's padding made explicit (`x`)."""

    def __init__(self, name: str, fmt: str, fields: tuple[str, ...], size: int) -> None:
        self.name = name
        self.struct = struct.Struct(fmt)
        self.fields = fields
        self.size = size                 # sizeof(struct) in C, tail payload excluded
        self.tuple = namedtuple(name, fields)
        self._make = self.tuple._make
        self._unpack_from = self.struct.unpack_from
        if self.struct.size > size:
            raise ValueError(f"record {name}: format {fmt!r} is larger than the struct ({size} bytes)")

    def unpack(self, raw: bytes, offset: int = 0):
        """The fields of the record at `offset` of `raw`, by name."""
        return self._make(self._unpack_from(raw, offset))

    def pack(self, **values) -> bytes:
        """The record's bytes; missing fields are zero. Padding up to sizeof is zero too."""
        args = []
        for name, code in zip(self.fields, _codes(self.struct.format)):
            args.append(values.pop(name, b"" if code.endswith("s") else 0))
        if values:
            raise TypeError(f"record {self.name}: no field {', '.join(values)}")
        return self.struct.pack(*args).ljust(self.size, b"\0")


def _codes(fmt: str) -> list[str]:
    """The value-taking codes of a struct format, e.g. '<II3x16s' -> ['I', 'I', '16s']."""
    out, count = [], ""
    for ch in fmt.lstrip("<>=!@"):
        if ch.isdigit():
            count += ch
            continue
        if ch != "x":
            out.append(count + ch if ch == "s" else ch)
            if ch != "s" and count:
                out.extend([ch] * (int(count) - 1))
        count = ""
    return out


def c_string(raw: bytes) -> str:
    """A zero-padded C char array (a task's comm) as text."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
