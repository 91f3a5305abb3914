"""Reading another process's memory: process_vm_readv through ctypes, which reads without stopping
the target and never writes to it. A target that exits or unmaps the memory mid-read gives a
MemoryReadError, which readers turn into a truncated stack or an unresolved frame, never a crash."""

from __future__ import annotations

import ctypes
import os
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .process import Process

_libc = ctypes.CDLL(None, use_errno=True)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_readv = _libc.process_vm_readv
_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                   ctypes.c_ulong]
_readv.restype = ctypes.c_ssize_t

MAX_READ = 1 << 20   # no single object a reader reads is larger: a bigger request means corrupt data
_U64, _U32, _I32 = struct.Struct("<Q"), struct.Struct("<I"), struct.Struct("<i")


class MemoryReadError(Exception):
    """The address is not readable in the target (freed, unmapped, or the process is gone)."""


def check_span(address: int, size: int) -> None:
    """Refuse a read no reader makes of sound data (past MAX_READ, at 0 or past the address space)."""
    if size > MAX_READ or address <= 0 or address + size > 1 << 64:
        raise MemoryReadError(f"refusing to read {size} bytes at {address:#x}")


def read_memory(pid: int, address: int, size: int) -> bytes:
    """`size` bytes at `address` of the live process `pid` (no bounds check: see check_span)."""
    buf = ctypes.create_string_buffer(size)
    local = _IoVec(ctypes.addressof(buf), size)
    remote = _IoVec(address, size)
    n = _readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if n != size:
        err = ctypes.get_errno() if n < 0 else 0
        raise MemoryReadError(f"pid {pid}: read of {size} bytes at {address:#x} failed"
                              f" ({os.strerror(err) if err else 'short read'})")
    return buf.raw


class MemoryView:
    """Little-endian integers over `read(address, size)`, which a subclass gives."""

    __slots__ = ()

    def read(self, address: int, size: int) -> bytes:
        raise NotImplementedError

    def u64(self, address: int) -> int:
        return _U64.unpack(self.read(address, 8))[0]

    def u32(self, address: int) -> int:
        return _U32.unpack(self.read(address, 4))[0]

    def i32(self, address: int) -> int:
        return _I32.unpack(self.read(address, 4))[0]

    def u8(self, address: int) -> int:
        return self.read(address, 1)[0]


class PagedMemory(MemoryView):
    """A read-only view that reads each 4 KiB page of another view once and serves every read from
    the pages read. It is for a reader of many small objects that sit together: the JVM's vmStructs
    are ~1000 entries and their ~2300 names in libjvm's data, ~4000 reads of 8-48 bytes (one syscall
    each, 0.1-0.2 s of a JVM's first second) but ~60 pages. For memory that does not change while
    it is read."""

    PAGE = 4096

    def __init__(self, memory: "Process") -> None:
        self.memory = memory
        self.pid = memory.pid
        self._pages: dict[int, bytes | None] = {}     # None: the page could not be read

    def _page(self, number: int) -> bytes:
        if number not in self._pages:
            try:
                self._pages[number] = self.memory.read(number * self.PAGE, self.PAGE)
            except MemoryReadError:
                self._pages[number] = None
        page = self._pages[number]
        if page is None:
            raise MemoryReadError(f"pid {self.pid}: page at {number * self.PAGE:#x} is not readable")
        return page

    def read(self, address: int, size: int) -> bytes:
        if size <= 0:
            return b""
        check_span(address, size)
        first, last = address // self.PAGE, (address + size - 1) // self.PAGE
        start = address - first * self.PAGE
        if first == last:
            return self._page(first)[start:start + size]
        data = b"".join(self._page(n) for n in range(first, last + 1))
        return data[start:start + size]
