"""A small ELF64 little-endian reader for BPF objects: sections, symbols, relocations.

BPF objects are tiny (kilobytes), so plain `struct` is fast enough and keeps the
loader free of dependencies.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import ObjectFormatError

EM_BPF = 247
SHT_SYMTAB = 2
SHT_NOBITS = 8
SHT_REL = 9
STT_SECTION = 3
STT_FUNC = 2
STB_GLOBAL = 1


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    data: bytes


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    type: int
    bind: int
    section_index: int


@dataclass(frozen=True)
class Relocation:
    offset: int
    symbol: Symbol
    type: int


class BpfElf:
    """Parsed view of one BPF object file."""

    def __init__(self, data: bytes) -> None:
        if len(data) < 64 or data[:4] != b"\x7fELF":
            raise ObjectFormatError("not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise ObjectFormatError("only 64-bit little-endian BPF objects are supported")
        (machine,) = struct.unpack_from("<H", data, 18)
        if machine != EM_BPF:
            raise ObjectFormatError(f"ELF machine is {machine}, not BPF ({EM_BPF})")
        shoff, = struct.unpack_from("<Q", data, 40)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
        if shoff + shnum * shentsize > len(data):
            raise ObjectFormatError("section headers lie past the end of the file")
        raw = []
        for i in range(shnum):
            name, typ, flags, _addr, off, size, link, info, _align, _entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + i * shentsize)
            if typ != SHT_NOBITS and off + size > len(data):
                raise ObjectFormatError(f"section {i} lies past the end of the file")
            raw.append((name, typ, flags, off, size, link, info))
        strtab = raw[shstrndx]
        names = data[strtab[3]:strtab[3] + strtab[4]]
        self.sections: list[Section] = []
        for i, (name, typ, flags, off, size, link, info) in enumerate(raw):
            content = bytes(size) if typ == SHT_NOBITS else data[off:off + size]
            self.sections.append(Section(i, _cstr(names, name), typ, flags, off, size, link, info, content))
        self.by_name = {s.name: s for s in self.sections}
        self.symbols = self._read_symbols()
        self._relocations: dict[int, list[Relocation]] = {}

    def _read_symbols(self) -> list[Symbol]:
        symtab = next((s for s in self.sections if s.type == SHT_SYMTAB), None)
        if symtab is None:
            raise ObjectFormatError("the object has no symbol table")
        strings = self.sections[symtab.link].data
        symbols = []
        for off in range(0, len(symtab.data) - 23, 24):
            name, info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", symtab.data, off)
            symbols.append(Symbol(_cstr(strings, name), value, size, info & 0xF, info >> 4, shndx))
        return symbols

    def relocations_for(self, section: Section) -> list[Relocation]:
        """Relocations that apply to `section` (from its SHT_REL companion), read once per section:
        every program of an object asks for .text's."""
        cached = self._relocations.get(section.index)
        if cached is None:
            cached = self._relocations[section.index] = self._read_relocations(section)
        return cached

    def _read_relocations(self, section: Section) -> list[Relocation]:
        out = []
        for rel in self.sections:
            if rel.type != SHT_REL or rel.info != section.index:
                continue
            for off in range(0, len(rel.data) - 15, 16):
                r_offset, r_info = struct.unpack_from("<QQ", rel.data, off)
                sym_index = r_info >> 32
                if sym_index >= len(self.symbols):
                    raise ObjectFormatError(f"relocation in {section.name} names symbol {sym_index}")
                out.append(Relocation(r_offset, self.symbols[sym_index], r_info & 0xFFFFFFFF))
        return out

    def symbols_in(self, section: Section) -> list[Symbol]:
        return [s for s in self.symbols if s.section_index == section.index and s.type != STT_SECTION and s.name]


def _cstr(blob: bytes, offset: int) -> str:
    end = blob.find(b"\0", offset)
    return blob[offset:end if end >= 0 else len(blob)].decode("utf-8", "replace")
