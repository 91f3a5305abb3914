"""Probe links as pyroscope.ebpf writes them, parsed and resolved.

`kprobe:SYMBOL`, `kretprobe:SYMBOL`, `uprobe:/path/to/binary:SYMBOL`,
`uretprobe:/path/to/binary:SYMBOL`. A uprobe symbol is looked up in the file's
.symtab and .dynsym; a version may be given as the linkers write it
(`malloc@@GLIBC_2.2.5` is the default version, `memcpy@GLIBC_2.2.5` any one).
The uprobe is placed at the symbol's file offset, found through the load
segments. Every bad link gives one ConfigError that names it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..symbols.elf import ELF_SYM, SHT_DYNSYM, SHT_SYMTAB, STT_FUNC, STT_GNU_IFUNC, ElfError, ElfFile

KINDS = ("kprobe", "kretprobe", "uprobe", "uretprobe")
SHT_GNU_VERDEF, SHT_GNU_VERSYM = 0x6FFFFFFD, 0x6FFFFFFF
VERSYM_HIDDEN = 0x8000



@dataclass(frozen=True)
class ProbeLink:
    text: str        # as written: errors name it
    kind: str        # kprobe, kretprobe, uprobe, uretprobe
    symbol: str
    path: str = ""   # uprobes only

    @property
    def is_user(self) -> bool:
        return self.kind in ("uprobe", "uretprobe")

    @property
    def is_return(self) -> bool:
        return self.kind in ("kretprobe", "uretprobe")


@dataclass(frozen=True)
class UprobeTarget:
    link: ProbeLink
    path: str
    offset: int      # file offset of the symbol
    address: int     # its ELF virtual address


def parse_probe_link(text: str) -> ProbeLink:
    kind, sep, rest = text.partition(":")
    if not sep or kind not in KINDS:
        raise ConfigError(f"probe link {text!r}: unknown probe type {kind!r} (expected one of {', '.join(KINDS)})")
    if kind in ("kprobe", "kretprobe"):
        if not rest or ":" in rest or "/" in rest:
            raise ConfigError(f"probe link {text!r}: expected {kind}:KERNEL_FUNCTION")
        return ProbeLink(text, kind, rest)
    path, sep, symbol = rest.rpartition(":")
    if not sep or not path or not symbol:
        raise ConfigError(f"probe link {text!r}: expected {kind}:/path/to/binary:SYMBOL")
    return ProbeLink(text, kind, symbol, path)


def parse_probe_links(probe_links: list[str] | tuple[str, ...] = (),
                      u_probe_links: list[str] | tuple[str, ...] = ()) -> list[ProbeLink]:
    """Alloy's rule: the legacy `u_probe_links` (`/path:SYMBOL`) are used only when `probe_links` is empty."""
    texts = list(probe_links) if probe_links else [f"uprobe:{u}" for u in u_probe_links]
    links = [parse_probe_link(t) for t in texts]
    seen: set[tuple[str, str, str]] = set()
    for link in links:
        key = (link.kind, link.path, link.symbol)
        if key in seen:
            raise ConfigError(f"probe link {link.text!r} is given twice")
        seen.add(key)
    return links


def resolve_uprobe(link: ProbeLink) -> UprobeTarget:
    """The file offset of a uprobe's symbol; ConfigError naming the link if anything is wrong."""
    if not os.path.exists(link.path):
        raise ConfigError(f"probe link {link.text!r}: {link.path}: no such file")
    try:
        elf = ElfFile(link.path)
    except ElfError as e:
        reason = str(e).removeprefix(f"{link.path}: ")
        raise ConfigError(f"probe link {link.text!r}: {link.path} is not a usable ELF file ({reason})") from None
    try:
        address = find_function(elf, link.symbol)
        if address is None:
            raise ConfigError(f"probe link {link.text!r}: no function {link.symbol!r} in {link.path} "
                              f"(searched .symtab and .dynsym)")
        offset = elf.vaddr_to_file_offset(address)
        if offset is None:
            raise ConfigError(f"probe link {link.text!r}: {link.symbol} at {address:#x} is outside the "
                              f"loadable segments of {link.path}")
        return UprobeTarget(link, os.path.realpath(link.path), offset, address)
    finally:
        elf.close()


def find_function(elf: ElfFile, name: str) -> int | None:
    """The address of function `name` (`sym`, `sym@@VERSION` or `sym@VERSION`), or None.

    An unversioned name prefers the default version where a library has several.
    """
    base, at, version = name.partition("@")
    default_only = version.startswith("@")
    version = version.lstrip("@")
    exact, candidates = None, []
    for section in elf.sections:
        if section.type not in (SHT_SYMTAB, SHT_DYNSYM) or section.link >= len(elf.sections) or not section.size:
            continue
        syms = np.frombuffer(elf.section_data(section), dtype=ELF_SYM,
                             count=section.size // ELF_SYM.itemsize)
        strings = elf.section_data(elf.sections[section.link])
        functions = (((syms["info"] & 0xF) == STT_FUNC) | ((syms["info"] & 0xF) == STT_GNU_IFUNC)) \
            & (syms["shndx"] != 0) & (syms["value"] != 0)
        # .symtab may spell the version into the name itself (`malloc@@GLIBC_2.2.5`).
        if at:
            rows = np.flatnonzero(functions & np.isin(syms["name"], _offsets_of(strings, name)))
            if len(rows):
                exact = int(syms["value"][rows[0]])
        rows = np.flatnonzero(functions & np.isin(syms["name"], _offsets_of(strings, base)))
        versions = _versions(elf, section) if section.type == SHT_DYNSYM else {}
        for row in rows:
            ver_name, hidden = versions.get(int(row), ("", False))
            candidates.append((int(syms["value"][row]), ver_name, hidden))
    if exact is not None:
        return exact
    if at:
        for address, ver_name, hidden in candidates:
            if ver_name == version and not (default_only and hidden):
                return address
        return None
    defaults = [a for a, _v, hidden in candidates if not hidden]
    return (defaults or [a for a, _v, _h in candidates] or [None])[0]


def _offsets_of(strings: bytes, name: str) -> np.ndarray:
    """Every string-table offset whose string is exactly `name` (tails of longer strings count too)."""
    needle = name.encode() + b"\0"
    offsets, pos = [], strings.find(needle)
    while pos >= 0:
        offsets.append(pos)
        pos = strings.find(needle, pos + 1)
    return np.array(offsets, dtype=np.uint32)


def _versions(elf: ElfFile, dynsym) -> dict[int, tuple[str, bool]]:
    """dynsym row -> (version name, hidden) from .gnu.version and .gnu.version_d."""
    versym = next((s for s in elf.sections if s.type == SHT_GNU_VERSYM), None)
    verdef = next((s for s in elf.sections if s.type == SHT_GNU_VERDEF), None)
    if versym is None or verdef is None or verdef.link >= len(elf.sections):
        return {}
    names: dict[int, str] = {}
    data = elf.section_data(verdef)
    strings = elf.section_data(elf.sections[verdef.link])
    pos = 0
    for _ in range(1 << 12):   # a bound: the chain comes from the file
        if pos + 20 > len(data):
            break
        _ver, _flags, index, count, _hash, aux, nxt = struct.unpack_from("<HHHHIII", data, pos)
        if count and pos + aux + 8 <= len(data):
            name_off, = struct.unpack_from("<I", data, pos + aux)
            end = strings.find(b"\0", name_off)
            names[index] = strings[name_off:end if end >= 0 else len(strings)].decode("utf-8", "replace")
        if not nxt:
            break
        pos += nxt
    indexes = np.frombuffer(elf.section_data(versym), dtype="<u2")
    return {row: (names.get(int(v) & 0x7FFF, ""), bool(v & VERSYM_HIDDEN))
            for row, v in enumerate(indexes) if int(v) & 0x7FFF >= 2}
