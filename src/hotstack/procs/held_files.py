"""Descriptors of the files a process maps, held for naming its frames after it exits.

A process in a mount namespace of its own (a container) maps files that no path of the host
opens: its image's layers are reached through /proc/PID/map_files or /proc/PID/root, and both are
gone once it exits. A container's job shorter than an interval exits before its samples are
named, and each of its frames was `[unknown]`. Its files are opened when the process is first
read (through map_files: the very files mapped) and held until the process is forgotten, after
its last samples were named; a file mapped by several processes (a container's libc) is held
once. A deleted file mapped by any process is held the same way: its path opens nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

from .maps import Mapping

# At most this many files held at once, of this many bytes in all (a deleted file held keeps its
# blocks on disk): a file past either bound is not held (counted in `refused`), and its frames are
# named only while its process runs, as before.
MAX_HELD_FILES = 256
MAX_HELD_BYTES = 2 << 30

HeldKey = tuple[str, int]        # (device as /proc/PID/maps writes it, inode)


class HeldFiles:
    def __init__(self, max_files: int = MAX_HELD_FILES, max_bytes: int = MAX_HELD_BYTES) -> None:
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._files: dict[HeldKey, list[int]] = {}     # key -> [descriptor, size, holders]
        self._lock = threading.Lock()
        self.bytes = 0
        self.refused = 0         # files not held: past a bound
        self.failed = 0          # files that could not be opened (the process exited first)

    def hold(self, pid: int, mappings: Iterable[Mapping], root_is_host: bool) -> tuple[HeldKey, ...]:
        """Hold the files of `mappings` (of the live process `pid`) that no host path reaches
        after it exits (all of them where its root is not the host's, else its deleted ones);
        the keys now held for it (give them back to `release`)."""
        if root_is_host:
            mappings = [m for m in mappings if m.path.endswith(" (deleted)")]   # (most have none)
            if not mappings:
                return ()
        keys: list[HeldKey] = []
        for m in mappings:
            if not m.is_file:
                continue
            key = (m.dev, m.inode)
            if key in keys:
                continue
            with self._lock:
                entry = self._files.get(key)
                if entry is not None:
                    entry[2] += 1
                    keys.append(key)
                    continue
            if self._open(pid, m, key):
                keys.append(key)
        return tuple(keys)

    def _open(self, pid: int, m: Mapping, key: HeldKey) -> bool:
        if len(self._files) >= self.max_files:
            self.refused += 1
            return False
        try:
            fd = os.open(f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.failed += 1
            return False
        st = os.fstat(fd)
        with self._lock:
            if st.st_ino != m.inode or key in self._files or self.bytes + st.st_size > self.max_bytes:
                # (another file mapped there since the maps were read; held by another thread meanwhile)
                entry = self._files.get(key) if st.st_ino == m.inode else None
                if entry is not None:
                    entry[2] += 1
                elif st.st_ino == m.inode:
                    self.refused += 1
                os.close(fd)
                return entry is not None
            self._files[key] = [fd, st.st_size, 1]
            self.bytes += st.st_size
        return True

    def path(self, dev: str, inode: int) -> str | None:
        """A path that opens the held file (device, inode), or None if it is not held."""
        entry = self._files.get((dev, inode))
        return f"/proc/self/fd/{entry[0]}" if entry is not None else None

    def release(self, keys: Iterable[HeldKey]) -> None:
        """One holder fewer for each key; a file with none left is closed."""
        with self._lock:
            for key in keys:
                entry = self._files.get(key)
                if entry is None:
                    continue
                entry[2] -= 1
                if entry[2] <= 0:
                    del self._files[key]
                    self.bytes -= entry[1]
                    os.close(entry[0])

    def close(self) -> None:
        with self._lock:
            for fd, _size, _holders in self._files.values():
                os.close(fd)
            self._files.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._files)
