"""The vDSO's image, for its unwind table and its symbols: its code is in no file (the mapping
`[vdso]`), but it is the kernel's own image, the same in every 64-bit process of the host, with its own .eh_frame. The kernel
unwinder (bpf/native_unwind.h) gives the mapping at mm->context.vdso the file key VDSO_KEY, and
userspace loads under that key the table of the image this process maps (found through the
auxiliary vector's AT_SYSINFO_EHDR, read from our own memory: no file, no /proc); the symbolizer
names a [vdso] frame from the same image's symbols, as perf does."""

from __future__ import annotations

import ctypes
import os
import struct

from ..bpf import schema
from ..procs.system import descriptor_path
from .elf import ElfError, ElfFile
from .symtab import SymbolTable

# NU_VDSO_INO, NU_VDSO_DEV (bpf/native_unwind.h): a device number no file has (major 4095,
# minor 0xfffff), so the key never names a real file.
VDSO_KEY = (schema.NU_VDSO_INO, schema.NU_VDSO_DEV)
VDSO_PATH = "[vdso]"
AT_SYSINFO_EHDR = 33
MAX_VDSO_BYTES = 1 << 20


def vdso_image() -> bytes | None:
    """This process's vDSO as an ELF image (headers to section headers), or None where there is
    none (a kernel without one, vdso=0) or it is not a 64-bit little-endian ELF."""
    try:
        getauxval = ctypes.CDLL(None).getauxval
    except (OSError, AttributeError):
        return None
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = [ctypes.c_ulong]
    base = getauxval(AT_SYSINFO_EHDR)
    if not base:
        return None
    header = ctypes.string_at(base, 64)
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", header, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
    size = shoff + shentsize * shnum
    if not 64 <= size <= MAX_VDSO_BYTES:
        return None
    return ctypes.string_at(base, size)


class VdsoSymbols:
    """The vDSO's function symbols (its image is the kernel's, the same in every 64-bit process):
    built once, on first use; None where this process has no vDSO image to read."""

    def __init__(self) -> None:
        self._table: SymbolTable | None = None
        self._elf: ElfFile | None = None
        self._tried = False

    def lookup(self, offset: int) -> tuple[str, int] | None:
        """(function, offset into it) at `offset` from the start of the [vdso] mapping, or None."""
        if not self._tried:
            self._tried = True
            self._open()
        if self._table is None or self._elf is None:
            return None
        vaddr = self._elf.file_offset_to_vaddr(offset)
        return self._table.lookup_many([vaddr])[0] if vaddr is not None else None

    def _open(self) -> None:
        fd = vdso_fd()
        if fd is None:
            return
        try:
            self._elf = ElfFile(descriptor_path(fd))
            self._table = SymbolTable(self._elf, plt=False, entry=False)
        except (ElfError, ValueError, IndexError):
            self._elf = self._table = None
        finally:
            os.close(fd)


def vdso_fd() -> int | None:
    """A descriptor of an anonymous file holding the vDSO image (for ElfFile, which maps a file),
    or None."""
    image = vdso_image()
    if image is None:
        return None
    fd = os.memfd_create("hotstack-vdso", os.MFD_CLOEXEC)
    try:
        os.write(fd, image)
    except OSError:
        os.close(fd)
        return None
    return fd
