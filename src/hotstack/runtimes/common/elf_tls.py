"""Where an interpreter's thread-local variable lives (Ruby's ruby_current_ec, Perl's
PL_current_context), from the ELF file's dynamic relocations: what the kernel walker needs to
read it from a sampled thread (x86-64's TLS models).

- DTV: the loader fills a tls_index slot with the file's module id; the variable is at
  `offset` in that module's TLS block (general- and local-dynamic models).
- TP: the loader fills a slot with the variable's offset from the thread pointer (initial-exec:
  TPOFF64, or a TLS descriptor's argument).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...symbols.elf import SHT_DYNSYM, SHT_RELA, ElfFile

ELF_RELA = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])
R_X86_64_DTPMOD64, R_X86_64_TPOFF64, R_X86_64_TLSDESC = 16, 18, 36


@dataclass(frozen=True)
class TlsAccess:
    dtv: bool          # True: `slot` holds a module id (DTV); False: an offset from the thread pointer
    slot: int          # vaddr of the slot the loader fills
    offset: int = 0    # DTV: the variable's offset in the module's TLS block


def dynsym_names(elf: ElfFile) -> bytes:
    """The dynamic string table (TLS symbols have values 0..n, which a symbol lookup may skip)."""
    return next((strings for _table, strings in elf.symbol_tables((SHT_DYNSYM,))), b"")


def _relocations(elf: ElfFile):
    for s in elf.sections:
        if s.type == SHT_RELA and s.size >= ELF_RELA.itemsize:
            yield np.frombuffer(elf.read(s.offset, s.size - s.size % ELF_RELA.itemsize), dtype=ELF_RELA)


def tls_slots(elf: ElfFile, symbol: bytes) -> dict[int, int]:
    """relocation type -> r_offset of the dynamic relocations against `symbol` (TLS ones)."""
    dynsym, strings = next(elf.symbol_tables((SHT_DYNSYM,)), (None, b""))
    pos = strings.find(b"\0" + symbol + b"\0")
    if dynsym is None or pos < 0:
        return {}
    syms = elf.symbol_entries(dynsym)
    index = np.flatnonzero(syms["name"] == pos + 1)
    if not len(index):
        return {}
    out: dict[int, int] = {}
    for rela in _relocations(elf):
        for r in rela[(rela["info"] >> np.uint64(32)) == np.uint64(index[0])]:
            out.setdefault(int(r["info"]) & 0xFFFFFFFF, int(r["offset"]))
    return out


def reloc_offsets(elf: ElfFile, kind: int) -> set[int]:
    """r_offset of every dynamic relocation of type `kind`, whatever its symbol."""
    out: set[int] = set()
    for rela in _relocations(elf):
        out.update(int(o) for o in rela["offset"][(rela["info"] & np.uint64(0xFFFFFFFF)) == np.uint64(kind)])
    return out


def tls_access(elf: ElfFile, symbol: bytes, value: int) -> TlsAccess | None:
    """How `symbol` (a TLS variable of the dynamic symbols, `value` its st_value: its offset in
    the module's TLS block) is reached, by the relocations against it; None if none tells."""
    if symbol not in dynsym_names(elf):
        return None
    slots = tls_slots(elf, symbol)
    if R_X86_64_DTPMOD64 in slots:
        return TlsAccess(True, slots[R_X86_64_DTPMOD64], value)
    if R_X86_64_TLSDESC in slots:
        return TlsAccess(False, slots[R_X86_64_TLSDESC] + 8)
    if R_X86_64_TPOFF64 in slots:
        return TlsAccess(False, slots[R_X86_64_TPOFF64])
    return None


__all__ = ["ELF_RELA", "R_X86_64_DTPMOD64", "R_X86_64_TLSDESC", "R_X86_64_TPOFF64", "TlsAccess", "dynsym_names",
           "reloc_offsets", "tls_access", "tls_slots"]
