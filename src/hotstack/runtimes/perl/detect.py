"""Is a process a Perl interpreter, which version, and how does a thread find its interpreter?

The interpreter is the mapped ELF file (libperl.so.X.Y, or a `perl` executable with libperl built
in, as Debian's is) that defines PL_version; that byte and PL_subversion give the version (the
revision is 5). With MULTIPLICITY (threaded builds, Debian's) every PL_ variable is a member of the
per-thread interpreter struct:
- 5.36+: the thread-local PL_current_context, found as ruby_current_ec is (ruby/detect.py): a
  DTPMOD64 slot gives a shared libperl's TLS module (PERL_INTERP_DTV), a TPOFF64 or TLSDESC slot
  the offset from the thread pointer (PERL_INTERP_TP).
- before: PL_curinterp, the main interpreter (PERL_INTERP_GLOBAL; the main thread only).
Without MULTIPLICITY, PL_curcop and PL_curstackinfo are globals (PERL_INTERP_STATIC, untested).

Member offsets are not in Debian's binaries (no debug info): offsets.py has them per version.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ... import procs
from ...bpf import schema
from ...symbols.elf import ElfError, ElfFile
from ..common.files import Unreadable, symbols
from ..common.memory import ReadThrough
from ..common.tls_interpreter import detect_tls_interpreter, filled_tls
from ..common.elf_tls import dynsym_names, tls_access
from .offsets import PerlOffsets, offsets_for

_NAME = re.compile(r"(?:^|/)(?:libperl\.so[0-9.]*|perl[0-9.]*)$")
_WANTED = (b"PL_version", b"PL_subversion", b"PL_curinterp", b"PL_current_context", b"PL_curcop",
           b"PL_curstackinfo")


@dataclass(frozen=True)
class PerlBinary:
    """What one interpreter file tells us, independent of any process (cacheable per file)."""

    path: str
    version: tuple[int, int, int]
    offsets: PerlOffsets
    interp_mode: int
    tls_slot: int           # vaddr of the loader-filled slot (module id, or offset from the thread pointer)
    tls_offset: int         # PERL_INTERP_DTV: PL_current_context's offset in the module's TLS block
    interp_address: int     # vaddr of PL_curinterp (PERL_INTERP_GLOBAL)
    curcop: int             # PERL_INTERP_STATIC: vaddr of PL_curcop, PL_curstackinfo
    curstackinfo: int
    threaded: bool          # COPs hold their file name (USE_ITHREADS) rather than a GV

    @property
    def multiplicity(self) -> bool:
        return self.interp_mode != schema.PERL_INTERP_STATIC


@dataclass(frozen=True)
class PerlProcess(ReadThrough):
    pid: int
    binary: PerlBinary
    base: int
    record_fields: dict
    process: procs.Process | None = None     # what it was read through (None: the live process `pid`)

    @property
    def offsets(self) -> PerlOffsets:
        return self.binary.offsets


def inspect_binary(path: str) -> PerlBinary | None:
    """The interpreter facts of one ELF file, or None if it is not Perl; Unreadable if it is and
    cannot be read."""
    try:
        with ElfFile(path) as elf:
            syms = symbols(elf, _WANTED)
            if b"PL_version" not in syms or b"PL_subversion" not in syms:
                return None
            minor = elf.read(elf.vaddr_to_file_offset(syms[b"PL_version"]), 1)[0]
            patch = elf.read(elf.vaddr_to_file_offset(syms[b"PL_subversion"]), 1)[0]
            version = (5, minor, patch)
            shown = ".".join(map(str, version))
            offsets = offsets_for(version[:2])
            if offsets is None:
                raise Unreadable(f"no structure offsets known for Perl {shown}", shown)
            mode, slot, tls_offset, interp, curcop, curstackinfo = schema.PERL_INTERP_NONE, 0, 0, 0, 0, 0
            access = tls_access(elf, b"PL_current_context", syms.get(b"PL_current_context", 0))
            if access is not None:
                mode = schema.PERL_INTERP_DTV if access.dtv else schema.PERL_INTERP_TP
                slot, tls_offset = access.slot, access.offset
            if mode == schema.PERL_INTERP_NONE and b"PL_curinterp" in syms:
                mode, interp = schema.PERL_INTERP_GLOBAL, syms[b"PL_curinterp"]
            if mode == schema.PERL_INTERP_NONE and b"PL_curcop" in syms and b"PL_curstackinfo" in syms:
                mode, curcop, curstackinfo = schema.PERL_INTERP_STATIC, syms[b"PL_curcop"], syms[b"PL_curstackinfo"]
            if mode == schema.PERL_INTERP_NONE:
                raise Unreadable("no symbol leads to the running interpreter (PL_current_context, "
                                 "PL_curinterp, PL_curcop)", shown)
            # a threaded perl (ithreads) has PL_thr_key; its COPs name their file with a string
            threaded = b"PL_thr_key" in dynsym_names(elf)
            return PerlBinary(path, version, offsets, mode, slot, tls_offset, interp, curcop, curstackinfo, threaded)
    except (ElfError, OSError, ValueError, TypeError, IndexError, struct.error):
        return None


def record_fields(binary: PerlBinary, base: int, mem: procs.Process) -> dict | None:
    """The walker's record (struct perl_proc) for one process, or None if its TLS slot is not filled yet."""
    o = binary.offsets
    tls_module, tls_offset, interp = 0, binary.tls_offset, 0
    curcop, curstackinfo = o.interp_curcop, o.interp_curstackinfo
    if binary.interp_mode in (schema.PERL_INTERP_DTV, schema.PERL_INTERP_TP):
        filled = filled_tls(mem, base, binary.interp_mode == schema.PERL_INTERP_DTV, binary.tls_slot,
                            binary.tls_offset)
        if filled is None:
            return None
        tls_module, tls_offset = filled
    elif binary.interp_mode == schema.PERL_INTERP_GLOBAL:
        interp = base + binary.interp_address
    else:
        curcop, curstackinfo = base + binary.curcop, base + binary.curstackinfo
    return dict(interp_address=interp, tls_offset=tls_offset, curcop=curcop, curstackinfo=curstackinfo,
                tls_module=tls_module, interp_mode=binary.interp_mode, dtv_entry=16, si_cxstack=o.si_cxstack,
                si_prev=o.si_prev, si_cxix=o.si_cxix, cx_size=o.cx_size, cx_oldcop=o.cx_oldcop,
                cx_sub_cv=o.cx_sub_cv, cx_retop=o.cx_retop)


_binaries: dict[tuple, PerlBinary | None] = {}


def detect(process: procs.Process | int) -> PerlProcess | None:
    """The Perl interpreter running in `process` (a Process, or a live one's pid), or None (not Perl,
    not started yet, or gone)."""
    found = detect_tls_interpreter(process, "perl", "Perl", _NAME, "libperl", _binaries, inspect_binary,
                                   lambda binary: binary.interp_mode == schema.PERL_INTERP_DTV, record_fields)
    if found is None:
        return None
    process, binary, at, fields = found
    return PerlProcess(process.pid, binary, at.base, fields, process)
