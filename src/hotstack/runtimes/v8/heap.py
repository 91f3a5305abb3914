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

from ..common.memory import MemoryReadError, Process
from .metadata import V8Layout

MAX_STRING = 1024          # names and paths longer than this are cut
MAX_LINE_ENDS = 1 << 20    # a script with more lines is given no line numbers
MAX_SOURCE = 1 << 22       # characters of a script's source read to find its lines
# the instance type bit of an external string that keeps no address of its characters (the same
# bit from V8 7 to 13, next to the representation and encoding bits the metadata gives)
UNCACHED_EXTERNAL_STRING = 0x10
MAX_CONTEXT_LOCALS = 4096  # a ScopeInfo with more is not read
# from this many context locals on, V8 (10 on) may keep their names in a hash table of one slot:
# the slots after them are then not where two slots a local put them, and no position is taken from there
HASHED_LOCALS = 75
TAIL_SLOTS = 8             # ScopeInfo slots after the context locals looked at for names and positions
NAME_SLOTS = 4             # of which the names are in the first ones


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

    def __init__(self, mem: Process, layout: V8Layout) -> None:
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
        """A V8 String's text (sequential and external, one- and two-byte; cons, thin, sliced)."""
        l = self.l
        kind = self.type_of(tagged)
        if kind >= l.first_nonstring_type or depth > 8:
            raise NotAnObject(f"{tagged:#x} is not a string")
        repr_ = kind & l.string_repr_mask
        length = self.mem.i32(tagged - 1 + l.string_length)
        if length < 0:
            raise NotAnObject("negative string length")
        if repr_ in (l.seq_tag, l.external_tag):
            return self.flat_chars(tagged, kind, min(length, MAX_STRING))
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
        raise NotAnObject("a string representation this reader does not know")

    def flat_chars(self, tagged: int, kind: int, n: int) -> str:
        """The first n characters of a sequential string (in the object) or an external one (in
        memory outside the heap that the string points at: Node's own modules are external)."""
        l = self.l
        one_byte = (kind & l.string_encoding_mask) == l.one_byte_tag
        size = n if one_byte else 2 * n
        if kind & l.string_repr_mask == l.seq_tag:
            start = tagged - 1 + l.seq_chars
        elif l.external_resource is None or kind & UNCACHED_EXTERNAL_STRING:
            # an uncached external string keeps no pointer to its characters: only its resource
            # (a C++ object whose data() is virtual) knows them
            raise NotAnObject("an external string without its characters' address")
        else:
            start = self.field(tagged, l.external_resource + 8)      # resource_data, after resource
        raw = self.mem.read(start, size)
        return raw.decode("latin-1") if one_byte else raw.decode("utf-16-le", "replace")

    def fixed_array(self, tagged: int, limit: int) -> list[int]:
        n = smi(self.field(tagged, self.l.fixed_array_length))
        if n < 0 or n > limit:
            raise NotAnObject("array too long")
        raw = self.mem.read(tagged - 1 + self.l.fixed_array_data, 8 * n)
        return list(struct.unpack(f"<{n}Q", raw))


def scope_info_name(heap: Heap, tagged: int) -> tuple[str, int]:
    """(function name, start position in the script) from a ScopeInfo.

    Its slots (after the map, and a FixedArray's length where it is one: V8Layout.scopeinfo_slots):
    flags, parameter count, context local count, then, from
    v8dbg_scopeinfo_idx_first_vars on, the context locals' names and infos (2 slots each). After
    them come the function variable (its name, a Smi) and the inferred name (`Module._load` of
    `Module._load = function ...`, the name an anonymous function gets). The start and end
    positions (Smis) are two fixed slots before the locals where first_vars leaves room for them
    (V8 12 on), and follow the inferred name before."""
    l = heap.l
    locals_ = smi(heap.field(tagged, l.scopeinfo_slots + 8 * l.scopeinfo_ncontextlocals))
    if not 0 <= locals_ <= MAX_CONTEXT_LOCALS:
        return "", -1
    start = l.scopeinfo_first_vars + 2 * locals_
    count = start + TAIL_SLOTS
    slots = struct.unpack(f"<{count}Q", heap.mem.read(tagged - 1 + l.scopeinfo_slots, 8 * count))
    fixed_positions = l.scopeinfo_first_vars - l.scopeinfo_ncontextlocals > 2
    tail = slots[start:start + NAME_SLOTS]
    name = _function_name(heap, tail)
    if fixed_positions:
        begin, end = slots[l.scopeinfo_first_vars - 2], slots[l.scopeinfo_first_vars - 1]
        ok = is_smi(begin) and is_smi(end) and 0 <= smi(begin) <= smi(end)
        return name, smi(begin) if ok else -1
    if locals_ >= HASHED_LOCALS:
        return name, -1
    prev = None
    for word in slots[start:]:
        if prev is not None and is_smi(word) and is_smi(prev) and 0 <= smi(prev) < smi(word):
            return name, smi(prev)
        prev = word
    return name, -1


def _function_name(heap: Heap, words: tuple[int, ...]) -> str:
    """The function variable's name, or the inferred name two slots after it where that is ''.
    Only these slots are looked at: a string further on is another object's (a module's URL)."""
    for i, word in enumerate(words[:2]):
        if not is_object(word):
            continue
        name = _string_or_empty(heap, word)
        if not name and i + 2 < len(words) and is_smi(words[i + 1]) and is_object(words[i + 2]):
            name = _string_or_empty(heap, words[i + 2])
        return name
    return ""


def _string_or_empty(heap: Heap, word: int) -> str:
    try:
        return heap.string(word)
    except (NotAnObject, MemoryReadError):
        return ""


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
    if repr_ not in (l.seq_tag, l.external_tag) or not 0 <= length <= MAX_SOURCE:
        raise NotAnObject("source not readable")
    return heap.flat_chars(tagged, kind, length)
