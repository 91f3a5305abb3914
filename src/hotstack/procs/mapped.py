"""A process's mappings and files by its pid: its maps (text, executable ones), its executable's
path, its root, and paths that open the very file a mapping maps."""

from __future__ import annotations

import os
import time

from .maps import Mapping, dev_field, read_maps
from .proc_files import read_text

# A new process is looked at by the process table and then by every frame source's detection in
# the same pid-watcher round: with `recent=True` they share one read of its maps and of its
# executable's path made less than RECENT_S ago, instead of one read each.
RECENT_S = 0.05
_recent: dict[tuple[str, int], tuple[float, object]] = {}


def _remembered(kind: str, pid: int, recent: bool, read):
    now = time.monotonic()
    if recent:
        hit = _recent.get((kind, pid))
        if hit is not None and now - hit[0] < RECENT_S:
            return hit[1]
    value = read()
    if len(_recent) >= 1024:
        for key, (at, _value) in list(_recent.items()):
            if now - at >= RECENT_S:
                _recent.pop(key, None)
    _recent[(kind, pid)] = (now, value)
    return value


def read_maps_text(pid: int, recent: bool = False) -> str:
    """/proc/PID/maps as text ('' when the process is gone); `recent`: a read of the last
    RECENT_S will do."""
    return _remembered("maps", pid, recent, lambda: read_text_or_empty(f"/proc/{pid}/maps"))


def read_exec_maps(pid: int, recent: bool = False) -> list[Mapping]:
    """read_maps (by PROCMAP_QUERY where the kernel has it, else from the text); `recent` as
    read_maps_text."""
    return _remembered("exec", pid, recent, lambda: read_maps(pid))


def exec_paths(pid: int, recent: bool = False) -> str:
    """The paths of `pid`'s executable mappings, one a line: what a frame source's first test looks
    for (an interpreter's library or executable is mapped executable), with no read of the whole
    maps text where the kernel answers PROCMAP_QUERY; `recent` as read_maps_text."""
    return "\n".join(m.path for m in read_exec_maps(pid, recent))


def exe_path(pid: int, recent: bool = False) -> str:
    """The path of the process's executable ('' when it is gone); `recent` as read_maps_text."""
    def read() -> str:
        try:
            return os.readlink(f"/proc/{pid}/exe")
        except OSError:
            return ""
    return _remembered("exe", pid, recent, read)


def root_path(pid: int) -> str:
    """The process's view of the filesystem: its files are opened under this prefix."""
    return f"/proc/{pid}/root"


def map_file_path(pid: int, mapping: Mapping) -> str:
    """The file behind a mapping, as the kernel keeps it open (valid even when deleted or in
    another mount namespace)."""
    return map_file_at(pid, mapping.start, mapping.end)


def map_file_at(pid: int, start: int, end: int) -> str:
    """map_file_path of the mapping [start, end) of `pid`."""
    return f"/proc/{pid}/map_files/{start:x}-{end:x}"


def mapped_file_path(pid: int, mapping: Mapping) -> str | None:
    """A path that opens the very file `mapping` maps, or None (the process is gone, or another
    file is there now). First the kernel's own reference (/proc/PID/map_files, root only): it opens
    the mapped file whatever its path says, in a chroot (whose maps show paths from hotstack's
    root, not the process's), in another mount namespace, deleted or replaced on disk since (a
    package upgrade). Then the path under the process's root and the path as it reads, each only
    if it is the mapped inode: a path names whatever is there now."""
    for path in (map_file_path(pid, mapping), f"/proc/{pid}/root{mapping.file_path}", mapping.file_path):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not mapping.inode or (st.st_ino == mapping.inode
                                 and dev_field(os.major(st.st_dev), os.minor(st.st_dev)) == mapping.dev):
            return path
    return None


def read_text_or_empty(path: str) -> str:
    try:
        return read_text(path)
    except OSError:
        return ""


_our_root: tuple[int, int] | None = None


def same_root(pid: int) -> bool:
    """Whether the process's root is this one's (its paths open the same files here)."""
    global _our_root
    try:
        theirs = os.stat(f"/proc/{pid}/root")
        if _our_root is None:
            ours = os.stat("/")
            _our_root = (ours.st_dev, ours.st_ino)
    except OSError:
        return True
    return (theirs.st_dev, theirs.st_ino) == _our_root

