"""The files the kernel unwinder met without a table (nu_missing), each held open from the moment
it is taken off the queue until its table is loaded (its process may exit, its file be deleted,
before the table exists), and the paths that open the files of processes gone since."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..bpf import schema
from ..procs import LiveProcess, Process, parent_pid
from ..symbols.vdso import VDSO_KEY, VDSO_PATH, vdso_fd
from .kernel_files import kernel_dev, maps_dev, mapped_path, open_checked, open_mapped

KNOWN_PATHS = 16384              # (ino, dev) -> path entries remembered for files of exited processes


@dataclass
class HeldFile:
    """A file waiting for its table."""

    fd: int          # the file, held open
    size: int        # its size: the smallest are built first
    display: str     # its path, as the process maps it
    uncached: bool = False   # its table is in no cache: it waits for a build


class QueuedFiles:
    """nu_missing's files, taken off the map and held (`held`: (ino, dev) -> HeldFile), and where
    files can be opened by path (`known_paths`). `loaded`: the keys whose tables are loaded (the
    caller's dict), which are neither held nor remembered."""

    def __init__(self, missing_map, loaded: dict) -> None:
        self.missing_map = missing_map
        self.loaded = loaded
        self.held: dict[tuple[int, int], HeldFile] = {}
        self.known_paths: dict[tuple[int, int], str] = {}       # (ino, dev) -> a path that opens it

    def learn_paths(self, mappings, root: str = "", root_is_host: bool = True) -> None:
        """Remember where the files of a process's executable mappings can be opened (procs.Mapping
        objects), for when the kernel queues one after every process that mapped it has exited
        (a compiler's passes, a loop of short commands): their /proc/PID/map_files are gone then."""
        for m in mappings:
            if not m.inode or not m.path.startswith("/") or m.deleted:
                continue
            try:
                key = (m.inode, maps_dev(m.dev))
            except ValueError:
                continue
            if key in self.loaded:
                continue
            self.known_paths[key] = m.path if root_is_host else f"{root}{m.path}"
        if len(self.known_paths) > KNOWN_PATHS:
            for key in list(self.known_paths)[:len(self.known_paths) // 2]:
                del self.known_paths[key]

    def take(self, limit: int) -> tuple[int, int]:
        """Take the queued files off nu_missing and open them, up to `limit` held at once; (deferred,
        failed): files left for the next sample that needs them to queue again, files that could
        not be opened."""
        deferred = failed = 0
        for raw_key, raw_value in self.missing_map.items():
            file, missing = schema.NU_FILE_KEY.unpack(raw_key), schema.NU_MISSING_VALUE.unpack(raw_value)
            self.missing_map.delete(raw_key)
            key = (file.ino, file.dev)
            if key in self.loaded or key in self.held:
                continue
            if len(self.held) >= limit:
                deferred += 1
                continue
            held = self.open(missing.pid, missing.start, missing.end, key)
            if held is None:
                failed += 1
                continue
            self.held[key] = held
        return deferred, failed

    def open(self, pid: int, start: int, end: int, key: tuple[int, int]) -> HeldFile | None:
        """The file behind the kernel's (ino, dev), held open. Through the process's mapping while it
        runs and still holds that file (open_mapped); else through a path a process that mapped it
        showed (checked to be that file); else through the process's parent's mapping at the same
        addresses. The last is a shell's child, sampled in the shell's code between its fork (which
        copies the shell's mappings where they are) and its exec (each run of a loop of commands).
        By the time this runs it has exec'd, and the shell, which maps that code, is rarely sampled
        (it waits), so no path of that file is known. The vDSO's is this process's image of it."""
        if key == VDSO_KEY:
            fd = vdso_fd()
            return HeldFile(fd, os.fstat(fd).st_size, VDSO_PATH) if fd is not None else None
        process = LiveProcess(pid)
        fd = open_mapped(process, start, end, key)
        if fd is not None:
            return self._held(fd, process, start, end, key)
        known = self.known_paths.get(key)     # (the pid watcher's thread adds to it)
        fd = open_checked(known, key) if known is not None else None
        if fd is not None:
            return HeldFile(fd, os.fstat(fd).st_size, known)
        parent_of = parent_pid(pid)      # (read only if the others fail)
        if not parent_of:
            return None
        parent = LiveProcess(parent_of)
        fd = open_mapped(parent, start, end, key)
        return self._held(fd, parent, start, end, key) if fd is not None else None

    def _held(self, fd: int, process: Process, start: int, end: int, key: tuple[int, int]) -> HeldFile:
        """A file opened through the process's mapping at [start, end), shown by the path it maps it
        by. A file on an overlay (the descriptor's numbers not the kernel's) is remembered by that
        path under the process's root: the host's paths do not reach it, and a process of it gone
        before naming is named with the mappings the kernel kept, by a path that opens the file."""
        mapped = mapped_path(process, start)
        st = os.fstat(fd)
        if mapped and mapped.startswith("/") and (st.st_ino, kernel_dev(st.st_dev)) != key:
            self.known_paths[key] = process.root() + mapped
        display = mapped or self.known_paths.get(key) or process.map_file_at(start, end)
        return HeldFile(fd, st.st_size, display)

    def close(self) -> None:
        """Let go of the files still waiting for a table."""
        for held in self.held.values():
            os.close(held.fd)
        self.held.clear()
