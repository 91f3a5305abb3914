"""Process identity and the table of processes seen while profiling.

A process is identified by (pid, start time): a pid that is reused by a new
process is a new entry, so two processes can never share cached maps or symbols.
Maps are read when a process is first seen, so a process that exits before the
samples are read still has its frames resolved.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from .containers import container_id_from_cgroup
from .maps import Mapping, MappingIndex, read_maps


@dataclass
class ProcessInfo:
    pid: int
    start_time: int           # clock ticks since boot (field 22 of /proc/PID/stat)
    comm: str
    exe: str = ""
    container_id: str = ""
    root: str = ""            # /proc/PID/root: the process's view of the filesystem
    root_is_host: bool = True # its root is ours: paths stay valid after it exits
    mappings: MappingIndex = field(default_factory=lambda: MappingIndex([]))
    alive: bool = True
    maps_read_at: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)


def read_start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # comm may hold spaces and parens: the fields after it start at the last ')'.
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _read_text(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_process(pid: int) -> ProcessInfo | None:
    start = read_start_time(pid)
    if start is None:
        return None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    return ProcessInfo(
        pid=pid, start_time=start, comm=_read_text(f"/proc/{pid}/comm").strip(), exe=exe,
        container_id=container_id_from_cgroup(_read_text(f"/proc/{pid}/cgroup")),
        root=f"/proc/{pid}/root", root_is_host=_same_root(pid), mappings=MappingIndex(read_maps(pid)))


def _exec_changed(info: ProcessInfo) -> bool:
    """An exec keeps the pid and start time but replaces the image (and so the maps)."""
    try:
        return os.readlink(f"/proc/{info.pid}/exe") != info.exe
    except OSError:
        return False


def _same_root(pid: int) -> bool:
    try:
        theirs, ours = os.stat(f"/proc/{pid}/root"), os.stat("/")
    except OSError:
        return True
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


class ProcessTable:
    """Processes seen during a run, by pid, refreshed on exec and pid reuse."""

    def __init__(self) -> None:
        self._by_pid: dict[int, ProcessInfo] = {}
        self._lock = threading.Lock()

    def observe(self, pid: int) -> ProcessInfo | None:
        """Record a pid as soon as it is seen (cheap when already known and unchanged)."""
        with self._lock:
            known = self._by_pid.get(pid)
        start = read_start_time(pid)
        if known is not None and start is None:
            known.alive = False
            return known
        if known is not None and start == known.start_time and not _exec_changed(known):
            return known
        info = read_process(pid)
        if info is None:
            return known
        with self._lock:
            self._by_pid[pid] = info
        return info

    def get(self, pid: int) -> ProcessInfo | None:
        with self._lock:
            known = self._by_pid.get(pid)
        return known if known is not None else self.observe(pid)

    # A process maps new code (dlopen, JIT) now and then; reread its maps for an unknown address,
    # but at most this often, since broken frame-pointer chains produce many addresses that
    # lie in no mapping at all.
    MAPS_REFRESH_S = 1.0

    def find_mapping(self, info: ProcessInfo, address: int) -> Mapping | None:
        """The mapping of `address`; rereads the maps if the process may have mapped new code."""
        found = info.mappings.find(address)
        if found is not None or not info.alive:
            return found
        now = time.monotonic()
        if now - info.maps_read_at < self.MAPS_REFRESH_S:
            return None
        info.maps_read_at = now
        if read_start_time(info.pid) != info.start_time:
            info.alive = False
            return None
        fresh = read_maps(info.pid)
        if fresh:
            info.mappings = MappingIndex(fresh)
            found = info.mappings.find(address)
        return found

    def forget_dead(self) -> int:
        """Drop processes that have exited; call between intervals, after their samples are resolved."""
        with self._lock:
            dead = [pid for pid, info in self._by_pid.items() if read_start_time(pid) != info.start_time]
            for pid in dead:
                del self._by_pid[pid]
        return len(dead)

    def __len__(self) -> int:
        return len(self._by_pid)

    def __bool__(self) -> bool:
        # An empty table is still a table: `table or ProcessTable()` must not replace it.
        return True
