"""Method* -> Frame, read from the JVM's metaspace and cached per process with an identity check.

A Method's name is Method -> ConstMethod -> ConstantPool entries (Symbols) for the method name and
ConstantPool -> pool holder (the class) -> its name Symbol. A Method* is trusted only if the reads
agree with each other: the name and signature indices are in the pool and point at Utf8 entries
(its tag array says so), and the class has a readable name. A cached name is used again only while
the Method still points at the same ConstMethod (one read): a class that was unloaded and whose
metaspace was reused gives a fresh read, not the old name. If the process is gone, the cached name
is kept (a JVM that exits mid-interval keeps its names). A frame's line is its bytecode index in its
method's line table (lines.py): an interpreted frame's from its bytecode pointer, a compiled frame's
from the scope at its pc.
"""

from __future__ import annotations

import bisect
import dataclasses
import struct

from ...profile.model import Frame, FrameKind
from ... import procs
from ..common.memory import MemoryReadError
from .jvm import JvmLayout
from .lines import LineTables, read_int

MAX_ENTRIES = 1 << 16      # per process and kind: beyond this the cache starts again
JVM_CONSTANT_UTF8 = 1
MAX_SYMBOL = 4096
MAX_PC_DESCS = 1 << 16     # an nmethod with more is not decoded (no inlined frames)
MAX_INLINE_DEPTH = 32


class NotAMethod(Exception):
    """The words read are not a live Method of this JVM."""


def java_frame(klass: str, method: str, source: str = "") -> Frame:
    """`package.Class.method`, as a Java stack trace shows a frame (without the line)."""
    return Frame(f"{klass.replace('/', '.')}.{method}", FrameKind.JAVA, file=source)


def stub_frame(name: str) -> Frame:
    """Code of the JVM's own (stubs, adapters, the call stub): its code blob's name."""
    return Frame(f"[jvm] {name}" if name else "[jvm]", FrameKind.JIT)


class Names:
    """The names of one JVM's methods and code blobs (a Process, or a live one's pid)."""

    def __init__(self, process: procs.Process | int, layout: JvmLayout) -> None:
        self.mem = procs.as_process(process)
        self.l = layout
        self._methods: dict[int, tuple[int, Frame | None]] = {}
        self._strings: dict[int, str] = {}
        self._klasses: dict[int, tuple[str, str]] = {}
        self._scopes: dict[tuple[int, int], list[Frame]] = {}
        self._pc_descs: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        self.lines = LineTables(self.mem, layout)
        self.read_errors = 0
        self.named = 0

    def method(self, method: int) -> Frame | None:
        if not method or method & 7:
            return None
        cached = self._methods.get(method)
        try:
            const = self.mem.u64(method + self.l.method_const)
            if cached is not None and cached[0] == const:
                return cached[1]
            found = self._read_method(const)
        except MemoryReadError:
            self.read_errors += 1
            return cached[1] if cached is not None else None
        except NotAMethod:
            found = None
        if len(self._methods) >= MAX_ENTRIES:
            self._methods.clear()
        self._methods[method] = (const, found)
        if found is not None:
            self.named += 1
        return found

    def interpreted(self, method: int, bcp: int) -> Frame | None:
        """An interpreted frame: its method, with the line of its bytecode pointer."""
        frame = self.method(method)
        if frame is None:
            return None
        const = self._const(method)
        return self._with_line(frame, const, bcp - self.lines.code_base(const))

    def _const(self, method: int) -> int:
        """The ConstMethod of a Method named by method() (0 if it is no longer cached)."""
        entry = self._methods.get(method)
        return entry[0] if entry is not None else 0

    def _with_line(self, frame: Frame, const: int, bci: int) -> Frame:
        """`frame` with the line of `bci` in its method, or as it is where the line is not known."""
        if not const or not self.l.reads_lines:
            return frame
        try:
            line = self.lines.line(const, bci)
        except MemoryReadError:
            self.read_errors += 1
            return frame
        return dataclasses.replace(frame, line=line) if line > 0 else frame

    def _read_method(self, const: int) -> Frame:
        l, mem = self.l, self.mem
        if not const or const & 7:
            raise NotAMethod("no ConstMethod")
        cp = mem.u64(const + l.const_constants)
        if not cp or cp & 7:
            raise NotAMethod("no ConstantPool")
        raw = mem.read(const + l.const_name_index, 4)
        name_index = int.from_bytes(raw[:2], "little")
        holder = mem.u64(cp + l.cp_holder)
        klass, source = self._klass(holder, cp)
        return java_frame(klass, self._utf8(cp, name_index), source)

    def _utf8(self, cp: int, index: int) -> str:
        """The Utf8 entry `index` of a ConstantPool, checked against its length and tag."""
        l, mem = self.l, self.mem
        length = mem.i32(cp + l.cp_length)
        if not 0 < index < length or length > 65536:
            raise NotAMethod("index out of the pool")
        tags = mem.u64(cp + l.cp_tags)
        if not tags or mem.i32(tags) != length or mem.u8(tags + 4 + index) != JVM_CONSTANT_UTF8:
            raise NotAMethod("not a Utf8 entry")
        return self._symbol(mem.u64(cp + l.cp_size + 8 * index))

    def _symbol(self, symbol: int) -> str:
        if not symbol or symbol & 7:
            raise NotAMethod("no Symbol")
        n = int.from_bytes(self.mem.read(symbol + self.l.symbol_length, 2), "little")
        if n > MAX_SYMBOL:
            raise NotAMethod("symbol too long")
        text = self.mem.read(symbol + self.l.symbol_body, n).decode("utf-8", "replace")
        if any(c < " " for c in text):
            raise NotAMethod("not a name")
        return text

    def _klass(self, holder: int, cp: int) -> tuple[str, str]:
        """(class name, source file) of a pool holder: cached, a class's name never changes."""
        found = self._klasses.get(holder)
        if found is not None:
            return found
        if not holder or holder & 7:
            raise NotAMethod("no holder")
        name = self._symbol(self.mem.u64(holder + self.l.klass_name))
        if not name:
            raise NotAMethod("class without a name")
        source = ""
        if self.l.cp_source_file >= 0:
            where = holder if self.l.cp_source_in_klass else cp
            index = int.from_bytes(self.mem.read(where + self.l.cp_source_file, 2), "little")
            if index:
                try:
                    source = self._utf8(cp, index)
                except NotAMethod:
                    source = ""
        if len(self._klasses) >= MAX_ENTRIES:
            self._klasses.clear()
        self._klasses[holder] = (name, source)
        return name, source

    def blob_name(self, address: int) -> str:
        """A code blob's name: a C string in libjvm's data, the same for the life of the process."""
        name = self._strings.get(address)
        if name is None:
            try:
                raw = self.mem.read(address, 64) if address else b""
            except MemoryReadError:
                self.read_errors += 1
                return ""
            name = raw.split(b"\0", 1)[0].decode("latin-1")
            if len(self._strings) < 4096:
                self._strings[address] = name
        return name

    def compiled(self, method: int, name_address: int, blob: int = 0, pc: int = 0,
                 leaf: bool = False) -> Frame | list[Frame] | None:
        """A frame in a code blob: a Java method if the blob is an nmethod (with the methods C1/C2
        inlined into it at pc, innermost first), else the blob itself."""
        name = self.blob_name(name_address)
        if not name.endswith("nmethod"):
            return stub_frame(name)
        outer = self.method(method)
        if outer is None or not blob:
            return outer
        return self.inlined(blob, method, pc, leaf) or outer

    def inlined(self, blob: int, method: int, pc: int, leaf: bool) -> list[Frame] | None:
        """The Java frames at `pc` of the nmethod `blob` (innermost first), from its scope
        descriptors; None if unknown. The nmethod must still be the one of `method` (it is checked:
        a flushed nmethod's memory may hold another's code by now)."""
        l = self.l
        if not l.reads_inlining:
            return None
        key = (blob, pc)
        cached = self._scopes.get(key)
        try:
            if self.mem.u64(blob + l.nmethod_method) != method:
                return None
            if cached is not None:
                return cached
            frames = self._decode_scopes(blob, pc, leaf)
        except MemoryReadError:
            self.read_errors += 1
            return cached
        except (NotAMethod, IndexError, ValueError, struct.error):
            frames = None
        if frames:
            if len(self._scopes) >= MAX_ENTRIES:
                self._scopes.clear()
            self._scopes[key] = frames
        return frames

    def _decode_scopes(self, blob: int, pc: int, leaf: bool) -> list[Frame] | None:
        l, mem = self.l, self.mem
        code_begin = self._code_begin(blob)
        offsets, scopes = self._descs(blob, code_begin)
        target = pc - code_begin
        # a return address has a PcDesc of its own; a sampled pc belongs to the next one
        at = bisect.bisect_left(offsets, target)
        if at >= len(offsets):
            return None
        decode = scopes[at]
        if not decode:
            return None
        data_begin, metadata = self._scopes_and_metadata(blob)
        frames: list[Frame] = []
        for _ in range(MAX_INLINE_DEPTH):
            if not decode:
                break
            data = mem.read(data_begin + decode, 16)
            sender, pos = read_int(data, 0, l.stream_excess)
            index, pos = read_int(data, pos, l.stream_excess)
            if index <= 0:
                raise NotAMethod("scope without a method")
            bci, pos = read_int(data, pos, l.stream_excess)
            method = mem.u64(metadata + 8 * (index - 1))
            frame = self.method(method)
            if frame is None:
                raise NotAMethod("scope method unreadable")
            frames.append(self._with_line(frame, self._const(method), bci + l.invocation_entry_bci))
            decode = sender
        return frames or None

    def _code_begin(self, blob: int) -> int:
        l = self.l
        if l.code_begin_relative:
            return blob + self.mem.i32(blob + l.blob_code_begin)
        return self.mem.u64(blob + l.blob_code_begin)

    def _scopes_and_metadata(self, blob: int) -> tuple[int, int]:
        """(the scopes data's address, the metadata array's) of an nmethod."""
        l, mem = self.l, self.mem
        if l.nm_immutable_data >= 0:
            scopes = mem.u64(blob + l.nm_immutable_data) + mem.i32(blob + l.nm_pcs_end_offset)
            return scopes, mem.u64(blob + l.blob_mutable_data) + mem.i32(blob + l.blob_relocation_size)
        metadata = blob + mem.i32(blob + l.nm_metadata_offset)
        if l.nm_scopes_begin < 0:       # JDK 8: an offset from the blob
            return blob + mem.i32(blob + l.nm_scopes_offset), metadata
        return mem.u64(blob + l.nm_scopes_begin), metadata

    def _descs(self, blob: int, code_begin: int) -> tuple[list[int], list[int]]:
        """The (pc offsets, scope decode offsets) of an nmethod's PcDescs, sorted by pc."""
        key = (blob, code_begin)
        found = self._pc_descs.get(key)
        if found is not None:
            return found
        l, mem = self.l, self.mem
        base = mem.u64(blob + l.nm_immutable_data) if l.nm_immutable_data >= 0 else blob
        begin, end = mem.i32(blob + l.nm_pcs_offset), mem.i32(blob + l.nm_pcs_end_offset)
        n = (end - begin) // l.pc_desc_size
        if not 0 < n <= MAX_PC_DESCS:
            raise ValueError("no PcDescs")
        raw = mem.read(base + begin, n * l.pc_desc_size)
        offsets, scopes = [], []
        for i in range(n):
            base = i * l.pc_desc_size
            offsets.append(struct.unpack_from("<i", raw, base + l.pc_desc_pc)[0])
            scopes.append(struct.unpack_from("<i", raw, base + l.pc_desc_scope)[0])
        if len(self._pc_descs) >= 1024:
            self._pc_descs.clear()
        self._pc_descs[key] = (offsets, scopes)
        return offsets, scopes
