"""A bounds-checked ELF reader for symbolization: headers, load segments, symbols, notes.

Symbol tables are read with numpy straight from an mmap of the file: 285-496x faster
than pyelftools on large libraries (bench/symbols.py). Every offset and size read from
the file is checked against the file size, and sizes are capped, so a corrupt or
hostile file gives an ElfError, never a crash, a hang or unbounded memory.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..content_hash import blake2b
from ..errors import HotstackError

MAX_FILE_SIZE = 4 << 30          # larger files are not symbolized
MAX_SECTIONS = 1 << 16
MAX_SYMBOLS = 20_000_000

SHT_SYMTAB, SHT_DYNSYM, SHT_NOTE, SHT_NOBITS, SHT_RELA = 2, 11, 7, 8, 4
EM_X86_64 = 62
R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT = 6, 7
MAX_PLT_BYTES = 4 << 20
_HASH_SLICE = 4 << 20    # hash_into hashes this much of a file, then lets its pages go
MAX_ENTRY_SIZE = 256     # program/section header entries are 56/64 bytes: larger is hostile
MAX_TABLES = 4           # symbol tables, relocation tables and notes read per file: a real file
MAX_NOTES = 16           # has one or two, a hostile one may declare thousands over the same bytes
PT_LOAD, PT_INTERP, PT_NOTE = 1, 3, 4
SHT_DYNAMIC, DT_NEEDED = 6, 1
STT_FUNC, STT_GNU_IFUNC = 2, 10

_RELA_DTYPE = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])
ELF_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),   # Elf64_Sym
                    ("value", "<u8"), ("size", "<u8")])


class ElfError(HotstackError):
    """The file is not an ELF file we can read (corrupt, truncated, unsupported)."""


@dataclass(frozen=True)
class ElfSection:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


def eh_frame_hdr_table(hdr: bytes) -> np.ndarray | None:
    """.eh_frame_hdr's search table, (count, 2) int32 pairs (a function's start, its FDE's address),
    each relative to the section's address, in the usual layout (version 1, a udata4 count, datarel
    sdata4 pairs); None in any other, or with no entry."""
    if len(hdr) < 12 or hdr[0] != 1 or hdr[2] != 0x03 or hdr[3] != 0x3B:
        return None
    count = struct.unpack_from("<I", hdr, 8)[0]
    if count == 0 or 12 + 8 * count > len(hdr):
        return None
    return np.frombuffer(hdr, "<i4", 2 * count, 12).reshape(-1, 2)


@dataclass(frozen=True)
class LoadSegment:
    vaddr: int
    offset: int
    filesz: int
    memsz: int
    flags: int


class ElfFile:
    """An ELF64 little-endian file opened for reading (mmap)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise ElfError(f"{path}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if not (st.st_mode & 0o170000 == 0o100000):
                raise ElfError(f"{path}: not a regular file")
            if st.st_size < 64:
                raise ElfError(f"{path}: too small to be ELF")
            if st.st_size > MAX_FILE_SIZE:
                raise ElfError(f"{path}: larger than {MAX_FILE_SIZE >> 30} GiB")
            self.size = st.st_size
            self.identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            self._mm = mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ)
        except OSError as e:
            raise ElfError(f"{path}: {e.strerror}") from None
        finally:
            os.close(fd)
        try:
            self._parse_header()
        except (struct.error, ValueError, IndexError) as e:
            self.close()
            raise ElfError(f"{path}: corrupt ELF ({e})") from None

    def close(self) -> None:
        try:
            self._mm.close()
        except (BufferError, ValueError):
            pass

    def release_pages(self, offset: int = 0, length: int = 0) -> None:
        """Drop the file's pages (those of [offset, offset + length) if a length is given) from
        this process's resident set: they stay in the page cache, and a later read faults them
        back in. A long-lived mapping otherwise keeps every page a lookup ever touched: Go's
        pclntab and large symbol tables added 20 MB to our RSS."""
        try:
            if length:
                start = offset - offset % mmap.PAGESIZE
                self._mm.madvise(mmap.MADV_DONTNEED, start, min(offset + length, self.size) - start)
            else:
                self._mm.madvise(mmap.MADV_DONTNEED)
        except (ValueError, OSError, AttributeError):     # closed, or no madvise on this platform
            pass

    def intact(self) -> bool:
        """False if the file was truncated in place since it was mapped.

        Reading a mapped page past a file's new end kills the process (SIGBUS), so a caller
        checks this before reading names from a long-lived mapping. A file replaced by rename
        is harmless (the mapping keeps the old inode); only the same inode, shorter, is not.
        """
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self.identity[:2] or st.st_size >= self.size

    def __enter__(self) -> "ElfFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- safe reads ---------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ElfError(f"{self.path}: read of {size} bytes at {offset:#x} is past the end of the file")
        return self._mm[offset:offset + size]

    def symbol_tables(self, kinds: tuple[int, ...] = (SHT_DYNSYM, SHT_SYMTAB)) -> Iterator[tuple[ElfSection, bytes]]:
        """Each non-empty symbol table of the `kinds` (in that order), with its string table's bytes."""
        for kind in kinds:
            for s in self.sections:
                if s.type == kind and s.size and s.link < len(self.sections):
                    strtab = self.sections[s.link]
                    yield s, self.read(strtab.offset, strtab.size)

    def symbol_entries(self, table: ElfSection) -> np.ndarray:
        """The entries of a symbol table (ELF_SYM records)."""
        return np.frombuffer(self.read(table.offset, table.size - table.size % ELF_SYM.itemsize), dtype=ELF_SYM)

    def find_code(self, pattern: bytes, limit: int = 8) -> list[int]:
        """The addresses where `pattern` occurs in the executable load segments (the first `limit`)."""
        found: list[int] = []
        for seg in self.segments:
            if not seg.flags & 1 or seg.offset + seg.filesz > self.size:
                continue
            at = self._mm.find(pattern, seg.offset, seg.offset + seg.filesz)
            while at >= 0 and len(found) < limit:
                found.append(seg.vaddr + at - seg.offset)
                at = self._mm.find(pattern, at + 1, seg.offset + seg.filesz)
        return found

    def view(self, offset: int, size: int) -> memoryview:
        """A zero-copy view of part of the file (bounds-checked)."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ElfError(f"{self.path}: view of {size} bytes at {offset:#x} is past the end of the file")
        return memoryview(self._mm)[offset:offset + size]

    def _cstr(self, table: ElfSection, offset: int) -> str:
        if offset >= table.size:
            return ""
        start = table.offset + offset
        # Never scan further than a name can be long, whatever the table claims.
        end = self._mm.find(b"\0", start, min(table.offset + table.size, start + 4096))
        if end < 0:
            end = table.offset + table.size
        return self._mm[start:min(end, start + 4096)].decode("utf-8", "replace")

    # -- headers ------------------------------------------------------------------------------
    def _parse_header(self) -> None:
        ident = self.read(0, 16)
        if ident[:4] != b"\x7fELF":
            raise ElfError(f"{self.path}: not an ELF file")
        if ident[4] != 2 or ident[5] != 1:
            raise ElfError(f"{self.path}: only 64-bit little-endian ELF is supported")
        (self.type, self.machine, _v, self.entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
         shentsize, shnum, shstrndx) = struct.unpack("<HHIQQQIHHHHHH", self.read(16, 48))
        self.segments: list[LoadSegment] = []
        self.note_ranges: list[tuple[int, int]] = []
        self.has_interp = False      # a PT_INTERP: a dynamically linked program (a loader runs it)
        if phnum and 56 <= phentsize <= MAX_ENTRY_SIZE:
            raw = self.read(phoff, phnum * phentsize)
            for i in range(phnum):
                p_type, p_flags, p_off, p_vaddr, _paddr, p_filesz, p_memsz, _align = struct.unpack_from(
                    "<IIQQQQQQ", raw, i * phentsize)
                if p_type == PT_LOAD:
                    self.segments.append(LoadSegment(p_vaddr, p_off, p_filesz, p_memsz, p_flags))
                elif p_type == PT_NOTE and p_off + p_filesz <= self.size:
                    self.note_ranges.append((p_off, p_filesz))
                elif p_type == PT_INTERP:
                    self.has_interp = True
        self.sections: list[ElfSection] = []
        if shnum > MAX_SECTIONS:
            raise ElfError(f"{self.path}: {shnum} sections is absurd")
        if shnum and 64 <= shentsize <= MAX_ENTRY_SIZE and shoff + shnum * shentsize <= self.size:
            raw = self.read(shoff, shnum * shentsize)
            headers = [struct.unpack_from("<IIQQQQIIQQ", raw, i * shentsize) for i in range(shnum)]
            names = None
            if shstrndx < shnum:
                h = headers[shstrndx]
                if h[4] + h[5] <= self.size:
                    names = ElfSection("", h[1], h[3], h[4], h[5], h[6], h[9])
            for h in headers:
                name = self._cstr(names, h[0]) if names else ""
                self.sections.append(ElfSection(name, h[1], h[3], h[4], h[5], h[6], h[9]))

    def section(self, name: str) -> ElfSection | None:
        for s in self.sections:
            if s.name == name:
                return s
        return None

    def section_data(self, section: ElfSection, cap: int = 1 << 30) -> bytes:
        if section.type == SHT_NOBITS:
            return b""
        if section.size > cap:
            raise ElfError(f"{self.path}: section {section.name} is larger than {cap} bytes")
        return self.read(section.offset, section.size)

    # -- identity -----------------------------------------------------------------------------
    def build_id(self) -> str:
        """The GNU build id as hex, or ''."""
        ranges = (list(self.note_ranges) + [(s.offset, s.size) for s in self.sections if s.type == SHT_NOTE])[:MAX_NOTES]
        for off, size in ranges:
            if off + size > self.size or size > 1 << 20:
                continue
            blob = self._mm[off:off + size]
            pos = 0
            while pos + 12 <= len(blob):
                namesz, descsz, ntype = struct.unpack_from("<III", blob, pos)
                name_end = pos + 12 + ((namesz + 3) & ~3)
                desc_end = name_end + ((descsz + 3) & ~3)
                if desc_end > len(blob):
                    break
                if ntype == 3 and blob[pos + 12:pos + 12 + namesz].rstrip(b"\0") == b"GNU":
                    return blob[name_end:name_end + descsz].hex()
                pos = desc_end
        return ""

    def symbol_digest(self) -> str:
        """A hash of everything a symbol lookup in this file reads: the headers (load segments map
        addresses), the symbol and string tables, the PLT and its relocations, the Go pclntab and
        the debug link. Two files with one build id but other bytes there (a corrupted copy, a
        patched one) differ here, so one never lends its names to the other."""
        h = blake2b(digest_size=16)
        h.update(struct.pack("<Q", self.size))
        h.update(self.read(0, 64))
        for seg in self.segments:
            h.update(struct.pack("<QQQQI", seg.vaddr, seg.offset, seg.filesz, seg.memsz, seg.flags))
        names = {".gopclntab", ".gnu_debuglink", ".plt", ".plt.sec", ".plt.got", ".go.buildinfo",
                 ".note.go.buildid"}
        if self.section(".gopclntab") is None and (self.section(".go.buildinfo") or self.section(".note.go.buildid")):
            names |= {".data.rel.ro", ".rodata"}      # where stripped Go binaries keep their pclntab
        used = set()
        for i, s in enumerate(self.sections):
            h.update(struct.pack("<IIQQQII", s.type, len(s.name), s.addr, s.offset, s.size, s.link, i))
            if s.type in (SHT_SYMTAB, SHT_DYNSYM, SHT_RELA) or s.name in names:
                used.add(i)
                if s.type in (SHT_SYMTAB, SHT_DYNSYM) and s.link < len(self.sections):
                    used.add(s.link)
        for i in sorted(used):
            s = self.sections[i]
            if s.type == SHT_NOBITS or s.offset + s.size > self.size:
                continue
            self.hash_into(h, s.offset, s.size)
        return h.hexdigest()

    def hash_into(self, h, offset: int, size: int) -> None:
        """h.update() with the file's bytes [offset, offset + size): no copy (a pclntab is
        megabytes), a slice at a time, each slice's pages let go once hashed. Hashing a large Go
        binary's sections whole would make them all resident at once: +13 MB of max RSS for its
        symbol digest and +16 MB for its unwind table's content key (the OpenTelemetry Collector)."""
        for pos in range(offset, offset + size, _HASH_SLICE):
            n = min(_HASH_SLICE, offset + size - pos)
            h.update(self.view(pos, n))
            self.release_pages(pos, n)

    def debuglink(self) -> tuple[str, int] | None:
        """(.gnu_debuglink file name, CRC32) or None."""
        s = self.section(".gnu_debuglink")
        if s is None or s.size < 8 or s.size > 4096:
            return None
        data = self.section_data(s)
        end = data.find(b"\0")
        if end <= 0:
            return None
        crc_off = (end + 4) & ~3
        if crc_off + 4 > len(data):
            return None
        return data[:end].decode("utf-8", "replace"), struct.unpack_from("<I", data, crc_off)[0]

    # -- addresses ----------------------------------------------------------------------------
    def file_offset_to_vaddr(self, offset: int) -> int | None:
        """The ELF virtual address that a file offset is loaded at (through PT_LOAD); None where no
        segment loads it, or where the segment's address would put it past 2**64 (a damaged or
        hostile header: such an address cannot be a frame's, and no profile format can carry it)."""
        for seg in self.segments:
            if seg.offset <= offset < seg.offset + max(seg.filesz, 1):
                vaddr = offset - seg.offset + seg.vaddr
                return vaddr if vaddr < 1 << 64 else None
        return None

    def vaddr_to_file_offset(self, vaddr: int) -> int | None:
        """The file offset that an ELF virtual address is loaded from (through PT_LOAD)."""
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return vaddr - seg.vaddr + seg.offset
        return None

    # -- symbols ------------------------------------------------------------------------------
    def function_symbols(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[ElfSection]]:
        """FUNC/IFUNC symbols of .symtab and .dynsym, sorted by address, one per address.

        Returns (values, sizes, name offsets, string-table index per row, string tables);
        names stay offsets so that only the names of frames actually shown are decoded.
        """
        values, sizes, names, tables = [], [], [], []
        strtabs: list[ElfSection] = []
        for kind in (SHT_SYMTAB, SHT_DYNSYM):   # .symtab first: it wins where both name an address
            for s in [s for s in self.sections if s.type == kind][:MAX_TABLES]:
                if s.size == 0 or s.link >= len(self.sections):
                    continue
                count = s.size // ELF_SYM.itemsize
                if count > MAX_SYMBOLS or s.offset + count * ELF_SYM.itemsize > self.size:
                    raise ElfError(f"{self.path}: symbol table {s.name} is corrupt or absurdly large")
                syms = np.frombuffer(self._mm, dtype=ELF_SYM, count=count, offset=s.offset)
                typ = syms["info"] & 0xF
                keep = (((typ == STT_FUNC) | (typ == STT_GNU_IFUNC)) & (syms["value"] != 0) & (syms["shndx"] != 0)
                        & (syms["name"] != 0))
                chosen = syms[keep]
                values.append(chosen["value"].astype(np.uint64))
                sizes.append(chosen["size"].astype(np.uint64))
                names.append(chosen["name"].astype(np.uint32))
                tables.append(np.full(len(chosen), len(strtabs), dtype=np.uint8))
                strtabs.append(self.sections[s.link])
        if not values:
            empty = np.zeros(0, dtype=np.uint64)
            return empty, empty, np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.uint8), []
        v, sz, nm, tb = (np.concatenate(a) for a in (values, sizes, names, tables))
        order = np.lexsort((tb, v))
        v, sz, nm, tb = v[order], sz[order], nm[order], tb[order]
        first = np.concatenate(([True], v[1:] != v[:-1])) if len(v) else np.zeros(0, dtype=bool)
        return v[first], sz[first], nm[first], tb[first], strtabs

    def needs_libraries(self) -> bool:
        """Whether the dynamic section names a library to load (DT_NEEDED): every shared library
        but the dynamic loader itself (and static programs, which have no dynamic section)."""
        for s in self.sections:
            if s.type != SHT_DYNAMIC or s.offset + s.size > self.size:
                continue
            entries = np.frombuffer(self.read(s.offset, s.size - s.size % 16), dtype="<i8").reshape(-1, 2)
            return bool((entries[:, 0] == DT_NEEDED).any())
        return False

    def function_index(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(function start addresses, their FDEs' addresses), by start, from .eh_frame_hdr's search
        table (its usual layout: a udata4 count, datarel sdata4 pairs); None without one."""
        hdr = self.section(".eh_frame_hdr")
        if hdr is None or hdr.offset + hdr.size > self.size:
            return None
        table = eh_frame_hdr_table(self.read(hdr.offset, hdr.size))
        if table is None:
            return None
        table = hdr.addr + table.astype(np.int64)
        order = np.argsort(table[:, 0], kind="stable")
        return table[order, 0], table[order, 1]

    def entry_code(self) -> tuple[int, int] | None:
        """(address, size) of the code at the entry point of a file the kernel starts (a program, or
        the dynamic loader: a PT_INTERP, or no DT_NEEDED): its FDE's range where one starts there,
        else up to the next function the CFI index lists (glibc's ld.so: no FDE for its entry).
        None for a shared library (whose e_entry some linkers point at any function), or with
        nothing to bound it."""
        if not self.entry or not (self.has_interp or not self.needs_libraries()):
            return None
        index = self.function_index()
        if index is None:
            return None
        starts, fdes = index
        i = int(np.searchsorted(starts, self.entry, side="right"))
        if i > 0 and int(starts[i - 1]) == self.entry:
            # the FDE: length, CIE pointer, pc_begin (pcrel sdata4: checked), pc_range
            fde = self.vaddr_to_file_offset(int(fdes[i - 1]))
            if fde is None or fde + 16 > self.size:
                return None
            begin, size = struct.unpack_from("<iI", self.read(fde + 8, 8))
            return (self.entry, size) if int(fdes[i - 1]) + 8 + begin == self.entry else None
        return (self.entry, int(starts[i]) - self.entry) if i < len(starts) else None

    def symbol_value(self, name: str) -> int | None:
        """The value of the .symtab (else .dynsym) symbol called exactly `name`, of any type; None
        if there is none. Finds the name in the string table first, so the table is not decoded."""
        want = b"\0" + name.encode() + b"\0"
        for kind in (SHT_SYMTAB, SHT_DYNSYM):
            for s in [s for s in self.sections if s.type == kind][:MAX_TABLES]:
                if s.size == 0 or s.link >= len(self.sections):
                    continue
                strtab = self.sections[s.link]
                strings = self.read(strtab.offset, strtab.size)
                count = s.size // ELF_SYM.itemsize
                if count > MAX_SYMBOLS or s.offset + count * ELF_SYM.itemsize > self.size:
                    continue
                syms = np.frombuffer(self._mm, dtype=ELF_SYM, count=count, offset=s.offset)
                pos = strings.find(want)
                while pos >= 0:
                    hit = syms["value"][syms["name"] == pos + 1]
                    if len(hit):
                        return int(hit[0])
                    pos = strings.find(want, pos + 1)
        return None

    def plt_symbols(self) -> list[tuple[int, int, str]]:
        """(address, size, "name@plt") of the PLT stubs (x86-64), which no symbol table names.

        Each stub jumps through a GOT slot (`jmp *disp32(%rip)`); the relocation of that slot
        (JUMP_SLOT in .rela.plt, GLOB_DAT in .rela.dyn for .plt.got) names the function. This
        works alike for .plt, .plt.sec (IBT) and .plt.got.
        """
        if self.machine != EM_X86_64:
            return []
        slots: dict[int, str] = {}
        for s in [s for s in self.sections if s.type == SHT_RELA][:MAX_TABLES]:
            if s.link >= len(self.sections) or s.size > MAX_PLT_BYTES:
                continue
            symtab = self.sections[s.link]
            if symtab.type != SHT_DYNSYM or symtab.link >= len(self.sections):
                continue
            count = s.size // _RELA_DTYPE.itemsize
            if s.offset + count * _RELA_DTYPE.itemsize > self.size:
                continue
            relas = np.frombuffer(self._mm, dtype=_RELA_DTYPE, count=count, offset=s.offset)
            kinds = relas["info"] & 0xFFFFFFFF
            keep = (kinds == R_X86_64_JUMP_SLOT) | (kinds == R_X86_64_GLOB_DAT)
            nsyms = symtab.size // ELF_SYM.itemsize
            if symtab.offset + nsyms * ELF_SYM.itemsize > self.size:
                continue
            syms = np.frombuffer(self._mm, dtype=ELF_SYM, count=nsyms, offset=symtab.offset)
            strtab = self.sections[symtab.link]
            for got, info in zip(relas["offset"][keep].tolist(), relas["info"][keep].tolist()):
                index = info >> 32
                if 0 < index < nsyms:
                    name = self._cstr(strtab, int(syms["name"][index]))
                    if name:
                        slots[got] = name
        if not slots:
            return []
        out: list[tuple[int, int, str]] = []
        for name in (".plt", ".plt.sec", ".plt.got"):
            s = self.section(name)
            if s is None or s.type == SHT_NOBITS or s.size > MAX_PLT_BYTES or s.offset + s.size > self.size:
                continue
            step = s.entsize if s.entsize in (8, 16) else 16
            data = self._mm[s.offset:s.offset + s.size]
            for k in range(0, len(data) - step + 1, step):
                pos = data.find(b"\xff\x25", k, k + step)
                if pos < 0 or pos + 6 > len(data):
                    continue
                disp = struct.unpack_from("<i", data, pos + 2)[0]
                target = s.addr + pos + 6 + disp
                sym = slots.get(target)
                if sym:
                    out.append((s.addr + k, step, sym + "@plt"))
        return out

    def symbol_name(self, strtab: ElfSection, offset: int) -> str:
        return self._cstr(strtab, int(offset))
