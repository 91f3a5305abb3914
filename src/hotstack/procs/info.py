"""ProcessInfo: what every layer knows of a process, read through its Process (procs/process.py).

A process is identified by (pid, start time): a pid that is reused by a new
process is a new entry, so two processes can never share cached maps or symbols.
Its image (the executable's device and inode) tells an exec apart. Maps are read
when a process is first seen, so a process that exits before the samples are
read still has its frames resolved.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .containers import container_id_from_cgroup
from .identity import Announced
from .maps import Mapping, MappingIndex
from .process import LiveProcess, Process


@dataclass
class ProcessInfo:
    pid: int
    start_time: int           # clock ticks since boot (field 22 of /proc/PID/stat)
    comm: str
    ppid: int = 0             # its parent when it was read (0: unknown)
    exe: str = ""
    container_id: str = ""
    root: str = ""            # /proc/PID/root: the process's view of the filesystem
    root_is_host: bool = True # its root is ours: paths stay valid after it exits
    mappings: MappingIndex = field(default_factory=lambda: MappingIndex([]))
    alive: bool = True
    maps_read_at: float = field(default_factory=time.monotonic)
    read_at: float = field(default_factory=time.monotonic)    # when this entry was read from /proc

    image: tuple | None = None   # (dev, inode) of the executable: an exec changes it
    mntns: int = 0               # its mount namespace (the inode of /proc/PID/ns/mnt); 0: unknown
    # the mappings before the last rereads, the latest first (EARLIER_MAPPINGS at most): the process
    # put another file where one was (a library unloaded, another loaded at its address); what it
    # had sampled before is named with the ones the kernel walked it in
    earlier: tuple = ()
    remapped_at: float = 0.0     # time.monotonic() of the last reread (0: none)
    changed: tuple = ()          # the address ranges the kernel saw change, (start, end) each
    # noted from its announcement alone (ProcessTable.note): nothing read from /proc yet; its
    # mappings are read when naming first needs them (ProcessTable.settle)
    lazy: bool = False
    told: Announced | None = None   # the announcement it was noted from
    settled_gone: bool = False      # noted, and gone when its mappings were needed (settle)
    # the files of its mappings held open for it (ProcessTable.held: those no host path reaches
    # after it exits), given back when it is forgotten
    held: tuple = ()
    # what it is read through (a LiveProcess of its pid unless given: a RecordedProcess in tests)
    process: Process | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.process is None:
            self.process = LiveProcess(self.pid)

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)

    def all_mappings(self) -> list[Mapping]:
        """Every mapping of the process now (not only the executable ones kept in `mappings`)."""
        return self.process.all_mappings()

    def is_current(self) -> bool:
        """The same process, running the same image, as when it was read."""
        return self.process.is_current(self.start_time, self.image)


def read_process(pid: int, stat: tuple[int, str, int] | None = None, told: Announced | None = None,
                 process: Process | None = None) -> ProcessInfo | None:
    """What is known of `pid` now (None when it is gone). `stat`: its read_stat(), just read.
    `told`: what its announcement said, standing for the stat where none is given. Then a process
    with neither an executable nor an executable mapping is gone (a zombie, or exited since), and
    one whose executable is not the announced one has exec'ed since: its name is read, as the
    announced one was its last image's. `process`: what to read it through (default: LiveProcess(pid))."""
    process = LiveProcess(pid) if process is None else process
    if stat is None:
        stat = process.stat() if told is None else (told.start_time, told.comm, told.ppid)
    if stat is None:
        return None
    exe = process.exe_path()
    mappings = process.exec_maps()
    image = process.image()
    if told is not None:
        if not exe and not mappings:
            return None
        if image is None or image[1] != told.exe_ino:
            stat = process.stat()
            if stat is None:
                return None
    labels = process.labels(False, False, False, True)
    return ProcessInfo(
        pid=pid, start_time=stat[0], comm=stat[1], ppid=stat[2], exe=exe,
        container_id=_container_id(labels.cgroup if labels is not None else ""),
        root=process.root(), root_is_host=process.root_is_host(),
        mappings=MappingIndex(mappings), image=image,
        mntns=told.mntns if told is not None and told.mntns else process.mount_namespace(), process=process)


_container_ids: dict[str, str] = {}


def _container_id(cgroup_text: str) -> str:
    """container_id_from_cgroup, remembered per text: a host's processes share a few cgroups."""
    found = _container_ids.get(cgroup_text)
    if found is None:
        if len(_container_ids) >= 4096:
            _container_ids.clear()
        found = _container_ids[cgroup_text] = container_id_from_cgroup(cgroup_text)
    return found


def exec_changed(info: ProcessInfo) -> bool:
    """An exec keeps the pid and start time but replaces the image (and so the maps)."""
    try:
        return os.readlink(f"/proc/{info.pid}/exe") != info.exe
    except OSError:
        return False
