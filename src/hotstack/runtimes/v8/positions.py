"""The executing position of a V8 frame: its bytecode offset, or its pc, to a script position.

V8 keeps, per BytecodeArray and per compiled Code, a source position table of entries (code offset,
source position). Each is stored as two deltas from the entry before (signed VLQ: zig-zag, then 7 bits
a byte, low bits first, 0x80 while more follow; the code delta's sign says whether the entry is a
statement: -d - 1 for one that is not). The first entry's deltas count from code offset -1 (the
function entry's stack check) and position 0. A position is V8's SourcePosition word: bit 0 set for
an external (non-script) position, bits 1-30 the script offset + 1 (0: none), bits 31-46 the
inlining id (0: the code's own function). The same from V8 7.8 (Node 12) to 13 (Node 24).

An interpreted (Ignition) frame's offset is in the frame (a Smi, counted from the tagged
BytecodeArray; a bytecode handler keeps the leaf's in a register). A compiled frame (TurboFan,
Maglev) is looked up by its pc in its function's current Code: a return address is looked up one
byte before it, as V8 does, so that a call maps to the call's position. In optimized code with
inlined functions, a pc in an inlined function's code is given the position of the call that
inlined it as the code's own function's last position at or before that pc (inlined frames are
not expanded into frames of their own). Baseline (Sparkplug) code maps pcs to bytecode offsets
through a table that needs each bytecode's length: not read, those frames keep their function's line.

Tables are cached per object, with the words that would change if the object were another: a
BytecodeArray's table pointer, a Code's instruction start and size.
"""

from __future__ import annotations

import bisect
import struct

from ..common.memory import MemoryReadError
from .heap import Heap, NotAnObject, is_object, is_smi, smi
from .metadata import LineLayout

MAX_TABLE = 1 << 20        # bytes of a source position table read at most
MAX_CODE = 1 << 24         # a Code larger than this is not believed
MAX_CACHED = 1 << 14       # tables per process: beyond this the cache starts again
CODE_ALIGNMENT = 32        # instructions start at a multiple of this (V8's kCodeAlignment: 32 or 64 on x64)
SCAN_CHUNK = 4096          # bytes read at a time looking back from a pc for its code's start
MAX_SCAN = 1 << 18         # how far back (a Code larger than this is not found from a pc)
MAX_TYPED_SCAN = 1 << 14   # ... before the map that starts a Code's instructions is known (a read a step)
_OFFSET_BITS = (1 << 30) - 1


def _uvlq(raw: bytes, i: int) -> tuple[int, int]:
    """An unsigned VLQ at raw[i]: (its value, where the next starts); IndexError past the end."""
    value, shift = 0, 0
    while True:
        byte = raw[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _vlq(raw: bytes, i: int) -> tuple[int, int]:
    """A signed (zig-zag) VLQ at raw[i]."""
    value, i = _uvlq(raw, i)
    return (value >> 1) ^ -(value & 1), i


def decode_table(raw: bytes) -> tuple[list[int], list[int]]:
    """(code offsets, source positions) of a source position table, in the table's order (a
    truncated last entry is left out)."""
    offsets: list[int] = []
    positions: list[int] = []
    code, position, i = -1, 0, 0
    try:
        while i < len(raw):
            delta, i = _vlq(raw, i)
            step, i = _vlq(raw, i)
            code += delta if delta >= 0 else -delta - 1
            position += step
            offsets.append(code)
            positions.append(position)
    except IndexError:
        pass
    return offsets, positions


def pc_ends(raw: bytes) -> list[int]:
    """A baseline Code's bytecode offset table: where the machine code of its prologue, then of
    each bytecode in turn, ends (offsets in its instructions)."""
    ends: list[int] = []
    end, i = 0, 0
    try:
        while i < len(raw):
            step, i = _uvlq(raw, i)
            end += step
            ends.append(end)
    except IndexError:
        pass
    return ends


# the prefixes that scale a bytecode's operands (Wide, ExtraWide and their DebugBreak forms): the
# same opcodes from V8 6.8 on
_SCALE = {0: 1, 1: 2, 2: 1, 3: 2}


def bytecode_starts(code: bytes, sizes: bytes) -> list[int]:
    """Where each bytecode of a BytecodeArray starts, its lengths from V8's kBytecodeSizes (three
    tables of one byte per opcode: single, double, quadruple operand scale; a length counts the
    opcode), a scaling prefix taken with the bytecode it scales."""
    count = len(sizes) // 3
    starts: list[int] = []
    i = 0
    while i < len(code):
        starts.append(i)
        scale = _SCALE.get(code[i], 0)
        prefix = 1 if scale else 0
        if i + prefix >= len(code) or code[i + prefix] >= count:
            break
        length = sizes[scale * count + code[i + prefix]]
        if not length:
            break
        i += prefix + length
    return starts


def script_offset(position: int) -> int:
    """The script offset of a SourcePosition word, -1 if it has none (external, or no position)."""
    if position & 1:
        return -1
    return ((position >> 1) & _OFFSET_BITS) - 1


def inlining_id(position: int) -> int:
    return (position >> 31) & 0xFFFF


def position_at(table: tuple[list[int], list[int]], offset: int) -> int:
    """The script offset at a code offset: the last entry at or before it, of the code's own
    function where that entry is an inlined one's (-1: none)."""
    offsets, positions = table
    i = bisect.bisect_right(offsets, offset) - 1
    while i >= 0 and inlining_id(positions[i]):
        i -= 1
    return script_offset(positions[i]) if i >= 0 else -1


class Positions:
    """Source position tables of one process's BytecodeArrays and Codes, read once each."""

    def __init__(self, heap: Heap, lines: LineLayout) -> None:
        self.heap = heap
        self.l = lines
        self._tables: dict[tuple, tuple[list[int], list[int]]] = {}
        self._code_map: int | None = None
        self._found: dict[int, int] = {}      # pc -> the Code that holds it (code_at)
        self._file_ranges: list[tuple[int, int]] | None = None

    def _table(self, key: tuple, tagged: int) -> tuple[list[int], list[int]] | None:
        found = self._tables.get(key)
        if found is not None:
            return found
        raw = self._bytes(tagged)
        if raw is None:
            return None
        found = decode_table(raw)
        if len(self._tables) >= MAX_CACHED:
            self._tables.clear()
        self._tables[key] = found
        return found

    def bytecode(self, array: int, offset: int) -> int:
        """The script offset of an interpreted frame at `offset` (its frame's Smi, or the register's
        value: counted from the tagged BytecodeArray), -1 if unknown."""
        l = self.l
        try:
            if not is_object(array) or self.heap.type_of(array) != l.type_bytecode_array:
                return -1
            length = smi(self.heap.field(array, self.heap.l.fixed_array_length))
            index = offset - (l.bytecode_data - 1)
            if not -1 <= index < length:
                return -1
            table_word = self.heap.field(array, l.bytecode_table)
            table = self._table(("b", array, table_word), table_word)
        except (MemoryReadError, NotAnObject):
            return -1
        return position_at(table, index) if table else -1

    def _range(self, code: int) -> tuple[int, int]:
        """(instruction start, size) of a Code object (NotAnObject if it is not one)."""
        l = self.l
        if not is_object(code) or self.heap.type_of(code) != l.type_code:
            raise NotAnObject("not a Code")
        start = self.heap.field(code, l.code_start) if l.code_start_pointer else code - 1 + l.code_start
        size = self.heap.mem.i32(code - 1 + l.code_size)
        if not 0 < size <= MAX_CODE:
            raise NotAnObject("a Code of no size")
        return start, size

    def _learn_map(self, code: int, start: int) -> None:
        """The map of the objects that hold instructions (InstructionStream, or Code where they are
        inline), from a Code of the process: how code_at() knows an object's start."""
        l = self.l
        if self._code_map is not None or not start:
            return
        header = l.stream_header if l.code_start_pointer else l.code_start
        try:
            if self.heap.type_of(start - header + 1) == (l.type_stream if l.code_start_pointer else l.type_code):
                self._code_map = self.heap.mem.u64(start - header)
        except (MemoryReadError, NotAnObject):
            pass        # a builtin's instructions (in the binary: no holder before them)

    def _in_file(self, pc: int) -> bool:
        """Whether pc is in an executable mapping of a file (node, libnode: the embedded builtins,
        C++), where no Code's instructions are: V8 puts those in anonymous memory (the mappings
        read once: a library loaded later is only scanned in vain)."""
        if self._file_ranges is None:
            try:
                self._file_ranges = sorted((m.start, m.end) for m in self.heap.mem.exec_maps() if m.is_file)
            except (OSError, ValueError):
                self._file_ranges = []
        i = bisect.bisect_right(self._file_ranges, (pc, float("inf"))) - 1
        return i >= 0 and self._file_ranges[i][0] <= pc < self._file_ranges[i][1]

    def code_at(self, pc: int) -> int:
        """The Code whose instructions hold pc (0: not found): a frame that runs other code than its
        function's (on-stack replacement, code replaced while the frame runs). Instructions start
        aligned (CODE_ALIGNMENT) right after their object's header, which begins with its map: the
        nearest such start at or below pc whose object's instructions reach past pc."""
        if pc in self._found:
            return self._found[pc]
        found = 0 if self._in_file(pc) else self._scan(pc)
        if len(self._found) >= MAX_CACHED:
            self._found.clear()
        self._found[pc] = found
        return found

    def _holder(self, start: int, map_word: int) -> int:
        """The Code whose instructions begin at `start`, whose holder's map word is `map_word`; 0 if
        there is none (found_start is checked against the Code's own record of where they begin)."""
        l = self.l
        holder = start - (l.stream_header if l.code_start_pointer else l.code_start)
        if not is_object(map_word) or start % CODE_ALIGNMENT:
            return 0
        if self._code_map is None:        # learn it: the map of an InstructionStream (or Code)
            kind = struct.unpack("<H", self.heap.mem.read(map_word - 1 + self.heap.l.instance_type, 2))[0]
            if kind != (l.type_stream if l.code_start_pointer else l.type_code):
                return 0
        elif map_word != self._code_map:
            return 0
        code = self.heap.mem.u64(holder + 8) if l.code_start_pointer else holder + 1
        try:
            found_start, _size = self._range(code)
        except (MemoryReadError, NotAnObject):
            return 0
        if found_start != start:
            return 0
        self._code_map = map_word
        return code

    def _pages_back(self, pc: int, limit: int):
        """(address, bytes) of the memory from pc's page down, a page at a time, up to `limit`
        bytes below pc or the first page that cannot be read. A word never spans two pages."""
        end = pc + 8
        while end > pc - limit:
            low = (end - 1) & ~(SCAN_CHUNK - 1)
            try:
                yield low, self.heap.mem.read(low, end - low)
            except MemoryReadError:
                return
            end = low

    def _scan(self, pc: int) -> int:
        """The nearest holder start at or below pc (by its map where known, else by each aligned
        word's map's instance type, the map then learned), and its Code if it holds pc."""
        l = self.l
        header = l.stream_header if l.code_start_pointer else l.code_start
        for low, data in self._pages_back(pc, MAX_SCAN if self._code_map is not None else MAX_TYPED_SCAN):
            for at in self._candidates(data, low, header):
                start = low + at + header
                try:
                    code = self._holder(start, struct.unpack_from("<Q", data, at)[0]) if start <= pc else 0
                except MemoryReadError:
                    code = 0
                if code:
                    return code if pc < start + self._range(code)[1] else 0
        return 0

    def _candidates(self, data: bytes, low: int, header: int):
        """Offsets in data of the words that may begin a holder, highest first: the known map's
        occurrences, else each word whose instructions would start aligned."""
        if self._code_map is not None:
            needle = struct.pack("<Q", self._code_map)
            at = data.rfind(needle)
            while at >= 0:
                yield at
                at = data.rfind(needle, 0, at)
            return
        at = (low + len(data) - 8 + header) // CODE_ALIGNMENT * CODE_ALIGNMENT - header - low
        while at >= 0:
            yield at
            at -= CODE_ALIGNMENT

    def _running(self, function: int, pc: int) -> tuple[int, int] | None:
        """(the Code that holds pc: its function's current one, else the one code_at() finds, and
        pc's offset in its instructions), or None."""
        start, size = self._current(function)
        if not start <= pc < start + size:
            code = self.code_at(pc)
            if not code:
                return None
            start, size = self._range(code)
        else:
            code = self.heap.field(function, self.l.function_code)
        return code, pc - start

    def _current(self, function: int) -> tuple[int, int]:
        """(instruction start, size) of the function's current Code; (0, 0) where the function
        keeps no Code (V8 13's leap tiering keeps a dispatch table handle in its place)."""
        try:
            code = self.heap.field(function, self.l.function_code)
            start, size = self._range(code)
        except NotAnObject:
            return 0, 0
        self._learn_map(code, start)
        return start, size

    def compiled(self, function: int, pc: int, return_address: bool, array: int) -> int:
        """The script offset of a compiled frame at `pc` (TurboFan, Maglev, and baseline through
        its frame's BytecodeArray `array`), -1 if no Code holds pc or it has no positions."""
        l = self.l
        try:
            running = self._running(function, pc)
            if running is None:
                return -1
            code, offset = running
            offset -= 1 if return_address and offset > 0 else 0
            start, size = self._range(code)
            table_word = self.heap.field(code, l.code_table)
            if l.kind_baseline >= 0:
                flags = self.heap.mem.i32(code - 1 + l.code_flags)
                if (flags & l.kind_mask) >> l.kind_shift == l.kind_baseline:
                    return self._baseline(("p", code, start, size), table_word, array, offset)
            table = self._table(("c", code, start, size), table_word)
        except (MemoryReadError, NotAnObject):
            return -1
        return position_at(table, offset) if table else -1

    def _baseline(self, key: tuple, table_word: int, array: int, offset: int) -> int:
        """A baseline (Sparkplug) frame's script offset: its code's bytecode offset table gives the
        length of the machine code of the prologue, then of each bytecode in turn (unsigned VLQs);
        the bytecodes' own lengths (V8's Bytecodes::kBytecodeSizes) where each starts; the
        BytecodeArray's table the position of that bytecode."""
        sizes = self.l.bytecode_sizes
        if not sizes or not is_object(array) or self.heap.type_of(array) != self.l.type_bytecode_array:
            return -1
        mapping = self._tables.get(key)
        if mapping is None:
            raw = self._bytes(table_word)
            length = smi(self.heap.field(array, self.heap.l.fixed_array_length))
            if raw is None or not 0 <= length <= MAX_TABLE:
                return -1
            code = self.heap.mem.read(array - 1 + self.l.bytecode_data, length)
            mapping = (pc_ends(raw), bytecode_starts(code, sizes))
            self._tables[key] = mapping
        ends, starts = mapping
        i = bisect.bisect_right(ends, offset)
        if i >= len(ends) or i - 1 >= len(starts):
            return -1
        index = starts[i - 1] if i else -1
        return self.bytecode(array, index + self.l.bytecode_data - 1)

    def _bytes(self, tagged: int) -> bytes | None:
        if not is_object(tagged) or self.heap.type_of(tagged) not in self.l.table_types:
            return None
        n = smi(self.heap.field(tagged, self.heap.l.fixed_array_length))
        if not 0 <= n <= MAX_TABLE:
            return None
        return self.heap.mem.read(tagged - 1 + 16, n) if n else b""

    def _return_into(self, function: int, words: tuple[int, ...]) -> int:
        """The first of `words` (the sample's stack top) that is an address in the function's
        current code (where it keeps none: in any Code), 0 if none is."""
        try:
            start, size = self._current(function)
        except MemoryReadError:
            return 0
        if size:
            return next((w for w in words if start < w < start + size), 0)
        return next((w for w in words if w > 0xFFFF and self.code_at(w)), 0)

    def of(self, function: int, pc: int, leaf: bool, array: int, slot: int, live: int,
           stack_top: tuple[int, ...] = ()) -> int:
        """The script offset of a recorded JavaScript frame, -1 if unknown: by its pc where it is in
        compiled code (the leaf's: else by the return address into its function's code on the
        stack top, where it called a builtin that made no frame), else by its bytecode offset (the
        register's first, at the leaf)."""
        position = self.compiled(function, pc, not leaf, array)
        if position < 0 and leaf and stack_top:
            caller = self._return_into(function, stack_top)
            if caller:
                position = self.compiled(function, caller, True, array)
        if position >= 0 or not is_smi(slot) or not is_object(array):
            return position
        if leaf and live:
            position = self.bytecode(array, live)
        return position if position >= 0 else self.bytecode(array, smi(slot))
