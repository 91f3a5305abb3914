"""Go function names (and file:line) from `.gopclntab`, which even stripped Go binaries keep.

Four table layouts exist, told apart by the magic number at the start of the table:
  0xfffffffb  Go 1.2-1.15   functab of (entry, funcoff) uintptr pairs after the header;
                            names and pc streams relative to the table start
  0xfffffffa  Go 1.16-1.17  pcHeader with offsets to funcnametab, cutab, filetab, pctab, pclntable
  0xfffffff0  Go 1.18-1.19  pcHeader adds textStart; functab becomes (u32 entryoff, u32 funcoff)
  0xfffffff1  Go 1.20+      same layout (the `_func` struct gains startLine)

The function entries become one sorted numpy array (the table is built in milliseconds even for
100k functions); names and lines are read only for the frames actually shown. Every read is
checked against the table's size: a corrupt table gives GoPclntabError, never a crash or a hang.
"""

from __future__ import annotations

import bisect
import struct

import numpy as np

from .elf import ElfError

GO12, GO116, GO118, GO120 = 0xFFFFFFFB, 0xFFFFFFFA, 0xFFFFFFF0, 0xFFFFFFF1
VERSIONS = {GO12: "1.2", GO116: "1.16", GO118: "1.18", GO120: "1.20"}
MAX_FUNCS = 10_000_000
MAX_NAME = 4096
MAX_PCVALUE_STEPS = 1 << 20     # a pc-value stream longer than this is corrupt
# Decoded pc-value streams kept (line and file streams of the functions looked up last): a
# profile asks for many addresses of the same hot functions, and a stream walked in Python from
# its start for every address cost most of a whole-host profile's symbolization on a host
# running Go builds (the compiler's functions have streams of thousands of steps).
MAX_DECODED_STREAMS = 2048


class GoPclntabError(ElfError):
    """The Go pc-line table is corrupt or of an unknown format."""


class GoPclntab:
    """Function table of one Go binary: address -> function name (and file:line)."""

    def __init__(self, data: bytes | memoryview, text_start: int = 0) -> None:
        self.data = data
        self._decoded: dict[int, tuple[list[int], list[int]]] = {}   # stream offset -> steps
        n = len(data)
        if n < 16:
            raise GoPclntabError("gopclntab: too short")
        magic, pad, quantum, ptrsize = struct.unpack_from("<IHBB", data, 0)
        if magic not in VERSIONS or pad != 0 or quantum not in (1, 2, 4) or ptrsize not in (4, 8):
            raise GoPclntabError(f"gopclntab: unknown header {magic:#x}/{quantum}/{ptrsize}")
        self.version = VERSIONS[magic]
        self.quantum = quantum
        self.ptrsize = ptrsize
        word = "<Q" if ptrsize == 8 else "<I"
        self._word = word

        def w(i: int) -> int:   # i-th pointer-sized header word after the 8-byte prefix
            return self._u(word, 8 + i * ptrsize)

        nfunc = w(0)
        if nfunc > MAX_FUNCS or nfunc * 8 > n:
            raise GoPclntabError(f"gopclntab: {nfunc} functions is absurd for a {n}-byte table")
        self.nfunc = nfunc
        wdt = np.dtype("<u8" if ptrsize == 8 else "<u4")
        if magic == GO12:
            self._names_base = 0
            self._pc_base = 0
            self._func_base = 0
            functab_off = 8 + ptrsize
            raw = self._array(functab_off, wdt, 2 * nfunc + 1)
            entries = raw[0:2 * nfunc:2].astype(np.uint64)
            funcoffs = raw[1:2 * nfunc:2].astype(np.uint64)
            end = int(raw[2 * nfunc])
            filetab_off = self._u("<I", functab_off + (2 * nfunc + 1) * ptrsize)
            self._filetab = filetab_off
            self._cutab = -1
            self._entry_size = ptrsize
        else:
            if magic == GO116:
                nfiles, names, cu, filetab, pctab, pcln = (w(i) for i in range(1, 7))
                text = 0
            else:
                nfiles, text, names, cu, filetab, pctab, pcln = (w(i) for i in range(1, 8))
            for off in (names, cu, filetab, pctab, pcln):
                if off > n:
                    raise GoPclntabError("gopclntab: header offset past the end of the table")
            self._names_base, self._cutab, self._filetab, self._pc_base = names, cu, filetab, pctab
            self._func_base = pcln
            if magic == GO116:
                raw = self._array(pcln, wdt, 2 * nfunc + 1)
                entries = raw[0:2 * nfunc:2].astype(np.uint64)
                funcoffs = raw[1:2 * nfunc:2].astype(np.uint64)
                end = int(raw[2 * nfunc])
                self._entry_size = ptrsize
            else:
                # The linker leaves textStart 0 when it is filled by a relocation (PIE) or kept in
                # moduledata (recent Go): the caller passes the address of .text then.
                base = text or text_start
                raw = self._array(pcln, np.dtype("<u4"), 2 * nfunc + 1)
                entries = raw[0:2 * nfunc:2].astype(np.uint64) + np.uint64(base)
                funcoffs = raw[1:2 * nfunc:2].astype(np.uint64)
                end = int(raw[2 * nfunc]) + base
                self._entry_size = 4
        if len(entries) > 1 and bool(np.any(entries[1:] < entries[:-1])):
            order = np.argsort(entries, kind="stable")
            entries, funcoffs = entries[order], funcoffs[order]
        self.entries = entries
        self.funcoffs = funcoffs
        self.ends = np.append(entries[1:], np.uint64(max(end, int(entries[-1]) if nfunc else 0)))
        self._names: dict[int, str] = {}

    # -- bounded reads ----------------------------------------------------------------------------
    def _u(self, fmt: str, off: int) -> int:
        size = struct.calcsize(fmt)
        if off < 0 or off + size > len(self.data):
            raise GoPclntabError(f"gopclntab: read at {off:#x} past the end")
        return struct.unpack_from(fmt, self.data, off)[0]

    def _array(self, off: int, dtype: np.dtype, count: int) -> np.ndarray:
        if off < 0 or off + count * dtype.itemsize > len(self.data):
            raise GoPclntabError("gopclntab: function table past the end")
        return np.frombuffer(self.data, dtype=dtype, count=count, offset=off)

    def _cstr(self, off: int) -> str:
        if off < 0 or off >= len(self.data):
            raise GoPclntabError("gopclntab: string offset past the end")
        chunk = bytes(self.data[off:off + MAX_NAME])
        end = chunk.find(b"\0")
        return chunk[:end if end >= 0 else len(chunk)].decode("utf-8", "replace")

    # -- lookups ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.nfunc

    @property
    def nbytes(self) -> int:
        decoded = sum(len(ends) for ends, _values in self._decoded.values())
        return int(self.entries.nbytes + self.funcoffs.nbytes + self.ends.nbytes) + 64 * len(self._names) + 72 * decoded

    def lookup_many(self, vaddrs: list[int]) -> list[tuple[str, int] | None]:
        if not self.nfunc or not vaddrs:
            return [None] * len(vaddrs)
        q = np.array(vaddrs, dtype=np.uint64)
        idx = np.searchsorted(self.entries, q, side="right") - 1
        out: list[tuple[str, int] | None] = []
        for address, i in zip(vaddrs, idx.tolist()):
            if i < 0 or address >= int(self.ends[i]):
                out.append(None)
                continue
            try:
                out.append((self.name(i), address - int(self.entries[i])))
            except GoPclntabError:
                out.append(None)
        return out

    def lookup_indexes(self, vaddrs) -> np.ndarray:
        """Index of the function covering each address, -1 where none does (vectorized)."""
        from .symtab import search_right

        q = np.asarray(vaddrs, dtype=np.uint64)
        if not self.nfunc:
            return np.full(len(q), -1, dtype=np.int64)
        idx = search_right(self.entries, q)
        safe = np.maximum(idx, 0)
        return np.where((idx >= 0) & (q < self.ends[safe]), idx, -1)

    def index_of(self, address: int) -> int:
        i = int(np.searchsorted(self.entries, np.uint64(address), side="right")) - 1
        return i if i >= 0 and address < int(self.ends[i]) else -1

    def _func(self, i: int) -> int:
        return self._func_base + int(self.funcoffs[i])

    def name(self, i: int, remember: bool = True) -> str:
        """Function i's name; `remember=False` for a pass over every function (a cache of all the
        names of a large binary is megabytes that such a pass reads once)."""
        cached = self._names.get(i)
        if cached is None:
            nameoff = self._u("<i", self._func(i) + self._entry_size)
            cached = self._cstr(self._names_base + nameoff)
            if remember:
                self._names[i] = cached
        return cached

    def line(self, address: int) -> tuple[str, int]:
        """(source file, line) of an address, or ('', 0): decoded on demand from the pc streams."""
        i = self.index_of(address)
        if i < 0:
            return "", 0
        try:
            func = self._func(i)
            e = self._entry_size
            pcfile = self._u("<I", func + e + 16)
            pcln = self._u("<I", func + e + 20)
            entry = int(self.entries[i])
            line = self._pcvalue(pcln, entry, address)
            fileno = self._pcvalue(pcfile, entry, address)
            if line < 0 or fileno < 0:
                return "", 0
            return self._file_name(func, fileno), line
        except GoPclntabError:
            return "", 0

    def sp_deltas(self, i: int) -> list[tuple[int, int]]:
        """(pc, SP delta) steps of function i from its pcsp stream, each valid up to the next step's
        pc (the last up to the function's end): how far SP is below the entry SP; [] if none."""
        func = self._func(i)
        off = self._u("<I", func + self._entry_size + 12)
        if off == 0:
            return []
        entry, end = int(self.entries[i]), int(self.ends[i])
        out = []
        start = 0
        for step_end, value in self._stream(off):
            out.append((entry + start, value))
            start = step_end
            if entry + start >= end:
                break
        return out

    def _file_name(self, func: int, fileno: int) -> str:
        if self._cutab < 0:   # Go 1.2: filetab is a u32 table of offsets from the table start
            if fileno == 0:
                return ""
            return self._cstr(self._u("<I", self._filetab + 4 * fileno))
        cu = self._u("<I", func + self._entry_size + 28)
        fileoff = self._u("<I", self._cutab + 4 * (cu + fileno))
        if fileoff == 0xFFFFFFFF:
            return ""
        return self._cstr(self._filetab + fileoff)

    def _varint(self, pos: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            if pos >= len(self.data) or shift > 35:
                raise GoPclntabError("gopclntab: bad varint")
            b = self.data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result, pos
            shift += 7

    def _pcvalue(self, off: int, entry: int, target: int) -> int:
        """The value of the pc-value stream at `off` for `target` in the function at `entry`; -1
        where the stream has none."""
        if off == 0:
            return -1
        ends, values = self._steps(off)
        i = bisect.bisect_right(ends, target - entry)
        return values[i] if i < len(ends) else -1

    def _stream(self, off: int):
        """The steps of the pc-value stream at `off`: (end of the step's pc range relative to the
        function's entry, its value), until the stream's end; GoPclntabError on a bad varint."""
        pos, value, pc = self._pc_base + off, -1, 0
        for step in range(MAX_PCVALUE_STEPS):
            uv, pos = self._varint(pos)
            if uv == 0 and step:
                return
            value += -((uv + 1) >> 1) if uv & 1 else uv >> 1
            delta, pos = self._varint(pos)
            pc += delta * self.quantum
            yield pc, value

    def _steps(self, off: int) -> tuple[list[int], list[int]]:
        """A stream decoded whole, once: (end of each step's pc range, relative to the function's
        entry; its value). Relative, since the linker shares one stream among functions whose
        streams are the same. A stream cut short by a bad varint keeps the steps before it."""
        found = self._decoded.get(off)
        if found is not None:
            return found
        ends: list[int] = []
        values: list[int] = []
        try:
            for step_end, value in self._stream(off):
                ends.append(step_end)
                values.append(value)
        except GoPclntabError:
            pass
        if len(self._decoded) >= MAX_DECODED_STREAMS:
            self._decoded.clear()
        self._decoded[off] = (ends, values)
        return ends, values

def find_pclntab(elf) -> GoPclntab | None:
    """The pclntab of a Go ELF file: its `.gopclntab` section, else a scan of the sections where
    PIE and externally linked Go binaries keep it. None for a file that is not Go."""
    # Go's code starts at runtime.text: where an external linker (cgo) put C code before it, that
    # is not the start of .text, and every function would be named after its neighbour.
    text_start = elf.symbol_value("runtime.text")
    if not text_start:
        text = elf.section(".text")
        text_start = text.addr if text is not None else 0
    section = elf.section(".gopclntab")
    if section is not None and section.size:
        return GoPclntab(elf.view(section.offset, section.size), text_start)
    if elf.section(".go.buildinfo") is None and elf.section(".note.go.buildid") is None:
        return None
    for name in (".data.rel.ro", ".rodata"):
        s = elf.section(name)
        if s is None or not s.size:
            continue
        data = elf.view(s.offset, s.size)
        raw = elf.read(s.offset, s.size) if s.size <= 64 << 20 else b""
        for magic in (GO120, GO118, GO116, GO12):
            pos = raw.find(struct.pack("<IH", magic, 0))
            attempts = 0
            while pos >= 0 and attempts < 16:    # a hostile section may repeat the magic everywhere
                attempts += 1
                try:
                    return GoPclntab(data[pos:], text_start)
                except GoPclntabError:
                    pos = raw.find(struct.pack("<IH", magic, 0), pos + 1)
    return None
