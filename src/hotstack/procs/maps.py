"""Memory mappings of a process, from /proc/PID/maps."""

from __future__ import annotations

import bisect
import ctypes
import errno
import fcntl
import os
import re
import struct
import threading
from typing import NamedTuple

from .proc_files import read_text


class Mapping(NamedTuple):
    """One line of /proc/PID/maps. (A NamedTuple: the pid watcher makes several for every new
    process of the host, and a frozen dataclass's __init__ sets each field through
    object.__setattr__, ~3x the time of tuple.__new__.)"""

    start: int
    end: int
    offset: int
    perms: str
    dev: str
    inode: int
    path: str

    @property
    def span(self) -> tuple[int, int, int, int]:
        """(start, end, file offset, inode): what its addresses hold; another span there is other code."""
        return (self.start, self.end, self.offset, self.inode)

    @property
    def executable(self) -> bool:
        return "x" in self.perms

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")

    @property
    def deleted(self) -> bool:
        return self.path.endswith(" (deleted)")

    @property
    def file_path(self) -> str:
        """The path without the kernel's ' (deleted)' suffix."""
        return self.path[:-len(" (deleted)")] if self.deleted else self.path


def _path(field: str) -> str:
    """A mapping's name as the maps text writes it, back as the kernel has it: the text escapes a
    newline in a path as \\012 (PROCMAP_QUERY gives it as it is); anything else is the path's own,
    spaces and control characters included."""
    return field.replace("\\012", "\n") if "\\012" in field else field


def parse_maps(text: str) -> list[Mapping]:
    """Every line of a /proc/PID/maps text. Lines end at "\\n" only (str.splitlines would also cut
    a path at the other line breaks Unicode knows), an anonymous mapping's line ends in a space."""
    out = []
    for line in text.split("\n"):
        parts = line.split(" ", 5)
        if len(parts) < 5:
            continue
        lo, _, hi = parts[0].partition("-")
        try:
            out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), parts[1], parts[3], int(parts[4]),
                               _path(parts[5].lstrip(" ")) if len(parts) > 5 else ""))
        except ValueError:
            continue
    return out


# The lines of executable mappings only (an 'x' third in the permissions). A process has three to
# five times as many other lines (data, heap, stacks, guard pages); one regex pass that skips them
# is ~4x faster than splitting every line (63 -> 15 us for xz's 44 lines). The pid watcher pays
# this for every new process of the host.
_EXEC_LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (..x.) ([0-9a-f]+) ([0-9a-f]+:[0-9a-f]+) (\d+) *([^\n]*)$", re.M)


def parse_exec_maps(text: str) -> list[Mapping]:
    """The executable mappings of a /proc/PID/maps text: [m for m in parse_maps(text) if
    m.executable], faster."""
    return [Mapping(int(lo, 16), int(hi, 16), int(offset, 16), perms, dev, int(inode), _path(path))
            for lo, hi, perms, offset, dev, inode, path in _EXEC_LINE.findall(text)]


# The PROCMAP_QUERY ioctl on /proc/PID/maps (Linux 6.11+, include/uapi/linux/fs.h) gives one
# mapping a call, the executable ones only when asked (the next at or after an address), as binary
# fields and a path: no text generated for the data, heap, stack and guard mappings, which are three
# to five times as many, and none parsed. For xz's 6 of 44 mappings: ~17 us, where reading the text
# took ~40 us and parsing its executable lines ~40 us more on this project's test machine; the pid
# watcher pays this for every new process of the host.
_PROCMAP_QUERY = 0xC0686611      # _IOWR('f', 17, struct procmap_query)
_QUERY = struct.Struct("<QQQQQQQQQIIIIQQ")    # struct procmap_query, 104 bytes
_QUERY_EXECUTABLE_FROM = 0x04 | 0x10           # VMA_EXECUTABLE | COVERING_OR_NEXT_VMA
# the permissions as the text writes them, by the low four vma_flags bits (readable 1, writable 2,
# executable 4 (always, here), shared 8)
_PERMS = tuple(("r" if f & 1 else "-") + ("w" if f & 2 else "-") + "x" + ("s" if f & 8 else "p") for f in range(16))
_ADDR_AT, _NAME_SIZE_AT = 16, 80                # query_addr, vma_name_size
_ANSWER_AT = 24                               # vma_start, vma_end, vma_flags, (page size), vma_offset,
_ANSWER = struct.Struct("<QQQ8xQQIII")        # inode, dev_major, dev_minor, vma_name_size
_U64, _U32 = struct.Struct("<Q"), struct.Struct("<I")
_devs: dict[tuple[int, int], str] = {}        # (major, minor) -> "fe:00", as the text writes it
_NAME_SIZE = 4096                             # PATH_MAX, its terminating 0 included
_query_name = ctypes.create_string_buffer(_NAME_SIZE)
_query_lock = threading.Lock()                # (one name buffer)
_query_works: bool | None = None              # None: not tried yet


def dev_field(major: int, minor: int) -> str:
    """A device as /proc/PID/maps writes it ("fe:00"), remembered: a host has a few."""
    dev = _devs.get((major, minor))
    if dev is None:
        dev = _devs[(major, minor)] = f"{major:02x}:{minor:02x}"
    return dev


def kernel_dev_field(dev: int) -> str:
    """The kernel's internal dev_t (major << 20 | minor, what a BPF program reads) as maps writes it."""
    return dev_field(dev >> 20, dev & 0xFFFFF)


def query_exec_maps(pid: int) -> list[Mapping] | None:
    """The executable mappings of `pid` by PROCMAP_QUERY, or None where that cannot tell: a kernel
    without it (before 6.11), a path longer than the buffer (the caller reads the text). Empty when
    the process is gone. (The gate page, x86-64's [vsyscall], is no VMA of the process: the text
    lists it, this does not; no sampled stack runs there.)"""
    global _query_works
    if _query_works is False:
        return None
    try:
        fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    out = []
    try:
        buf = bytearray(_QUERY.size)
        address = 0
        with _query_lock:
            name = ctypes.addressof(_query_name)
            _QUERY.pack_into(buf, 0, _QUERY.size, _QUERY_EXECUTABLE_FROM, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                             _NAME_SIZE, 0, name, 0)
            while True:
                # (per call only what the kernel reads and wrote over: the address, the name's room)
                _U64.pack_into(buf, _ADDR_AT, address)
                _U32.pack_into(buf, _NAME_SIZE_AT, _NAME_SIZE)
                try:
                    fcntl.ioctl(fd, _PROCMAP_QUERY, buf, True)
                except OSError as e:
                    if e.errno == errno.ENOENT:       # no executable mapping past `address`
                        break
                    if e.errno in (errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP):
                        _query_works = False
                        return None
                    if e.errno == errno.ESRCH:       # it exited (its address space is gone)
                        return []
                    return None    # (a path longer than the buffer, anything else: the text tells)
                start, end, flags, offset, inode, major, minor, name_size = _ANSWER.unpack_from(buf, _ANSWER_AT)
                path = ctypes.string_at(name, name_size - 1).decode("utf-8", "replace") if name_size > 1 else ""
                out.append(Mapping(start, end, offset, _PERMS[flags & 0xF], dev_field(major, minor), inode, path))
                address = end
    finally:
        os.close(fd)
    _query_works = True
    return out


def read_maps(pid: int) -> list[Mapping]:
    """Executable mappings of `pid`; empty when the process is gone."""
    queried = query_exec_maps(pid)
    if queried is not None:
        return queried
    try:
        return parse_exec_maps(read_text(f"/proc/{pid}/maps"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []


class MappingIndex:
    """Address -> mapping, by binary search over sorted start addresses."""

    def __init__(self, mappings: list[Mapping]) -> None:
        self.mappings = sorted(mappings, key=lambda m: m.start)
        self._starts = [m.start for m in self.mappings]

    def find(self, address: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and address < self.mappings[i].end:
            return self.mappings[i]
        return None
