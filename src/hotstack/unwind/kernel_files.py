"""Files as the kernel unwinder knows them: by inode and the kernel's device number (its dev_t,
major << 20 | minor), the key of their tables (struct nu_file_key). Here: those numbers from
os.stat and /proc/PID/maps, the key the kernel gives a stack walked in files (file_stack_hash),
and the opening of the file behind a key, checked to be that very file (a path may name another
file by now, an overlay shows other numbers than the layer's file the kernel reads).
"""

from __future__ import annotations

import functools
import os

from ..bpf import schema
from ..procs import Process, as_process
from ..procs.system import is_proc_path, is_under_process_root

def kernel_dev(st_dev: int) -> int:
    """os.stat's st_dev -> the kernel's internal dev_t (what the program reads from the superblock)."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


@functools.lru_cache(maxsize=1024)     # (a host has a few devices; each new process's mappings name them)
def maps_dev(field: str) -> int:
    """/proc/PID/maps' device field ("fd:01", hex major:minor) -> the kernel's internal dev_t."""
    major, minor = (int(x, 16) for x in field.split(":"))
    return (major << 20) | minor


_U64 = (1 << 64) - 1


def _mix(h: int, word: int) -> int:
    """nu_mix (bpf/native_unwind.h): one word more into a running hash."""
    h = ((h ^ word) * schema.NU_HASH_PRIME) & _U64
    return h ^ (h >> schema.NU_HASH_SHIFT)


# (inode, device) as /proc/PID/maps shows a file on an overlay -> (inode, device) the kernel
# unwinder reads (the layer's file under it), as open_mapped met them
_LAYER_FILES: dict[tuple[int, int], tuple[int, int]] = {}
LAYER_FILES = 4096


def file_stack_hash(mappings, pcs: tuple[int, ...], end: int) -> int | None:
    """The key the kernel gives a stack whose every frame is in a file (nu_hash: by inode, device
    and file offset per frame), with the file of each address taken from `mappings` (a
    procs.MappingIndex); None if an address is in none of its file mappings. Equal to the
    kernel's: the addresses were walked in those files (a file on an overlay by the numbers of
    the layer's file under it, once its table was opened through a mapping)."""
    h = schema.NU_HASH_BASIS
    layers = _LAYER_FILES
    for i, pc in enumerate(pcs):
        m = mappings.find(pc - 1 if i else pc)     # (a return address: its call is before it)
        if m is None or not m.inode:
            return None
        ino, dev = m.inode, maps_dev(m.dev)
        if layers:
            ino, dev = layers.get((ino, dev), (ino, dev))
        h = _mix(_mix(_mix(h, ino), dev), (pc - m.start + m.offset) & _U64)
    h = _mix(_mix(h, len(pcs)), end)
    return h or 1


def exec_mappings(process: Process | int) -> list[tuple[int, int, int, int, int, str]]:
    """(start, end, file offset, inode, kernel dev, path) of the executable mappings of `process` (a
    Process, or a live one's pid), by address."""
    return [(m.start, m.end, m.offset, m.inode, maps_dev(m.dev) if m.inode else 0, m.path)
            for m in as_process(process).exec_maps()]


def open_mapped(process: Process | int, start: int, end: int, key: tuple[int, int]) -> int | None:
    """A descriptor of the file `process` (a Process, or a live one's pid) maps at [start, end) if
    that is key's file (the kernel's inode and device), else None. Process.map_file_at
    (/proc/PID/map_files) opens whatever is mapped there now. A library
    unloaded and another of the same size loaded at its addresses since the kernel met key's (a
    plugin host) is another file: its table loaded under key would unwind key's code with the other
    file's rules, every stack of it wrong. The descriptor's own numbers decide where they are the
    kernel's. A file on an overlay shows the overlay's device (the kernel unwinder reads the
    layer's, under it) and, with layers on several filesystems, the layer's inode number in its
    low bits. There the process's maps, read after the open, must show key's inode at those
    addresses (a swap and a swap back within that read would pass, microseconds); the numbers they
    show are kept as that file's for file_stack_hash."""
    process = as_process(process)
    try:
        fd = os.open(process.map_file_at(start, end), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if (st.st_ino, kernel_dev(st.st_dev)) == key:
        return fd
    for s, e, _off, ino, dev, _path in exec_mappings(process):
        if (s, e) == (start, end) and ino & _LOW_32 == key[0] & _LOW_32:
            if len(_LAYER_FILES) >= LAYER_FILES:
                _LAYER_FILES.clear()
            _LAYER_FILES[(ino, dev)] = key     # (what names stacks walked in it: file_stack_hash)
            return fd
    os.close(fd)
    return None


_LOW_32 = (1 << 32) - 1


def open_checked(path: str, key: tuple[int, int]) -> int | None:
    """A descriptor of the file at `path` if it is key's very file, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    if is_file(os.fstat(fd), key):
        return fd
    os.close(fd)
    return None


def is_file(st: os.stat_result, key: tuple[int, int]) -> bool:
    """Whether a stat is of key's file: its numbers, or those an overlay shows for it (open_mapped)."""
    shown = (st.st_ino, kernel_dev(st.st_dev))
    return shown == key or _LAYER_FILES.get(shown) == key


def mapped_path(process: Process | int, start: int) -> str | None:
    """The path of the executable mapping of `process` that starts at `start`, or None."""
    for s, _e, _o, _i, _d, path in exec_mappings(process):
        if s == start:
            return path
    return None


def host_path(paths, key: tuple[int, int]) -> str | None:
    """The first of `paths` that opens key's file now: a host path, or one under a live process's
    root (a container's); a descriptor's path (/proc/PID/fd/N) is never one."""
    for path in paths:
        if not path or not path.startswith("/") or (is_proc_path(path) and not is_under_process_root(path)):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if is_file(st, key):
            return path
    return None
