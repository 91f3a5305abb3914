"""Reading V8 heap objects from a live process: a JSFunction to `name (script:line)`.

Tagged words (64-bit, no pointer compression): a heap object pointer has low bit 1, a small
integer (Smi) low bit 0 with its value in the upper 32 bits. Every object starts with its map,
whose instance type says what it is; every read checks it, so a word that is not what the frame
layout promised (a stale frame, memory reused by the garbage collector) gives no name rather
than a wrong one.
"""

from __future__ import annotations

import bisect
import struct

from ..common.memory import MemoryReadError, ProcessMemory
from .metadata import V8Layout

MAX_STRING = 1024          # names and paths longer than this are cut
MAX_LINE_ENDS = 1 << 20    # a script with more lines is given no line numbers
SCOPE_INFO_SLOTS = 16      # ScopeInfo slots looked at for the name and the start position


class NotAnObject(Exception):
    """A word is not the V8 object the layout says it should be."""


def is_smi(word: int) -> bool:
    return word & 1 == 0


def smi(word: int) -> int:
    return struct.unpack("<i", struct.pack("<I", (word >> 32) & 0xFFFFFFFF))[0]


def is_object(word: int) -> bool:
    return word & 3 == 1


class Heap:
    """Object reads in one process, with the instance type of each map cached."""

    def __init__(self, mem: ProcessMemory, layout: V8Layout) -> None:
        self.mem = mem
        self.l = layout
        self._map_types: dict[int, int] = {}

    def type_of(self, tagged: int) -> int:
        if not is_object(tagged):
            raise NotAnObject(f"{tagged:#x} is not a heap object")
        addr = tagged - 1
        map_word = self.mem.u64(addr + self.l.map_offset)
        if not is_object(map_word):
            raise NotAnObject(f"{tagged:#x} has no map")
        kind = self._map_types.get(map_word)
        if kind is None:
            kind = struct.unpack("<H", self.mem.read(map_word - 1 + self.l.instance_type, 2))[0]
            if len(self._map_types) < 4096:
                self._map_types[map_word] = kind
        return kind

    def field(self, tagged: int, offset: int) -> int:
        return self.mem.u64(tagged - 1 + offset)

    def string(self, tagged: int, depth: int = 0) -> str:
        """A V8 String's text (one-byte and two-byte sequential, cons, thin, sliced)."""
        l = self.l
        kind = self.type_of(tagged)
        if kind >= l.first_nonstring_type or depth > 8:
            raise NotAnObject(f"{tagged:#x} is not a string")
        repr_ = kind & l.string_repr_mask
        length = self.mem.i32(tagged - 1 + l.string_length)
        if length < 0:
            raise NotAnObject("negative string length")
        if repr_ == l.seq_tag:
            one_byte = (kind & l.string_encoding_mask) == l.one_byte_tag
            n = min(length, MAX_STRING)
            raw = self.mem.read(tagged - 1 + l.seq_chars, n if one_byte else 2 * n)
            return raw.decode("latin-1") if one_byte else raw.decode("utf-16-le", "replace")
        if repr_ == l.cons_tag:
            first = self.string(self.field(tagged, l.cons_first), depth + 1)
            if len(first) >= MAX_STRING:
                return first[:MAX_STRING]
            return (first + self.string(self.field(tagged, l.cons_second), depth + 1))[:MAX_STRING]
        if repr_ == l.thin_tag:
            return self.string(self.field(tagged, l.thin_actual), depth + 1)
        if repr_ == l.sliced_tag:
            start = smi(self.field(tagged, l.sliced_offset))
            parent = self.string(self.field(tagged, l.sliced_parent), depth + 1)
            return parent[start:start + min(length, MAX_STRING)]
        raise NotAnObject("external strings are not read")

    def fixed_array(self, tagged: int, limit: int) -> list[int]:
        n = smi(self.field(tagged, self.l.fixed_array_length))
        if n < 0 or n > limit:
            raise NotAnObject("array too long")
        raw = self.mem.read(tagged - 1 + self.l.fixed_array_data, 8 * n)
        return list(struct.unpack(f"<{n}Q", raw))


def scope_info_name(heap: Heap, tagged: int) -> tuple[str, int]:
    """(function name, start position in the script) from a ScopeInfo. Its layout changes from
    version to version and has no metadata: after the context locals, the first string is the
    function name, and the first two Smis in increasing order are its start and end positions."""
    l = heap.l
    raw = heap.mem.read(tagged - 1 + 8, 8 * SCOPE_INFO_SLOTS)
    slots = struct.unpack(f"<{SCOPE_INFO_SLOTS}Q", raw)
    start = l.scopeinfo_first_vars + 2 * max(0, smi(slots[l.scopeinfo_ncontextlocals]))
    name, prev = "", None
    for word in slots[start:]:
        if not name and is_object(word):
            try:
                name = heap.string(word)
            except (NotAnObject, MemoryReadError):
                pass
        if prev is not None and is_smi(word) and is_smi(prev) and 0 <= smi(prev) < smi(word):
            return name, smi(prev)
        prev = word
    return name, -1


class Script:
    __slots__ = ("name", "line_ends")

    def __init__(self, name: str, line_ends: list[int]) -> None:
        self.name = name
        self.line_ends = line_ends

    def line(self, position: int) -> int:
        """1-based line of a character position; 0 if unknown."""
        if position < 0 or not self.line_ends:
            return 0
        return bisect.bisect_left(self.line_ends, position) + 1


def read_script(heap: Heap, tagged: int) -> Script:
    l = heap.l
    name = ""
    try:
        name = heap.string(heap.field(tagged, l.script_name))
    except (NotAnObject, MemoryReadError):
        pass
    ends: list[int] = []
    if l.script_line_ends:
        try:
            words = heap.fixed_array(heap.field(tagged, l.script_line_ends), MAX_LINE_ENDS)
            ends = [smi(w) for w in words]
        except (NotAnObject, MemoryReadError):
            ends = []
    if not ends:
        # V8 computes line ends on demand: until then, from the source text.
        try:
            source = _source_text(heap, heap.field(tagged, l.script_source))
            ends = [i for i, c in enumerate(source) if c == "\n"]
        except (NotAnObject, MemoryReadError):
            ends = []
    return Script(name, ends)


def _source_text(heap: Heap, tagged: int) -> str:
    """A script's source (may be large: read without the name limit)."""
    l = heap.l
    kind = heap.type_of(tagged)
    if kind >= l.first_nonstring_type:
        raise NotAnObject("source is not a string")
    repr_ = kind & l.string_repr_mask
    length = heap.mem.i32(tagged - 1 + l.string_length)
    if repr_ == l.thin_tag:
        return _source_text(heap, heap.field(tagged, l.thin_actual))
    if repr_ != l.seq_tag or not 0 <= length <= (1 << 20):
        raise NotAnObject("source not readable")
    one_byte = (kind & l.string_encoding_mask) == l.one_byte_tag
    raw = heap.mem.read(tagged - 1 + l.seq_chars, length if one_byte else 2 * length)
    return raw.decode("latin-1") if one_byte else raw.decode("utf-16-le", "replace")
