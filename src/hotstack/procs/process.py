"""Process: one process as every layer reads it, through one interface with two implementations.

- LiveProcess: a running process, read from /proc and with process_vm_readv (the profiler's).
- RecordedProcess (procs/recorded.py): a process recorded into a directory by `record` (its maps,
  the bytes of its memory, copies of its files, its identity and labels), read with no /proc, no
  root and no process alive: tests of the runtimes' readers and of the symbolizer run on it.

What a reader asks a Process: its identity (pid, start time, the executable's device and inode), its
mappings, bytes of its memory, a path that opens the file a mapping maps, its root and its labels
(cgroup, command line). Memory reads are the hot ones (a runtime reader makes a few per frame):
LiveProcess.read is one process_vm_readv, as cheap as a call can make it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from . import identity, mapped
from .labels import ProcessLabels, process_labels
from .maps import Mapping, parse_maps
from .memory import MemoryView, check_span, read_memory


class Process(MemoryView, ABC):
    """A process to read (see the module's text). `recent` (on the maps and the executable's path):
    a live read made less than mapped.RECENT_S ago will do."""

    __slots__ = ()
    pid: int

    @abstractmethod
    def stat(self) -> tuple[int, str, int] | None:
        """(start time in clock ticks since boot, comm, parent pid); None when it is gone."""

    @abstractmethod
    def image(self) -> tuple | None:
        """(device, inode) of its executable: an exec changes it; None when it is gone."""

    @abstractmethod
    def exe_path(self, recent: bool = False) -> str:
        """The path of its executable ('' when it is gone)."""

    @abstractmethod
    def exe_file(self) -> str:
        """A path that opens its executable itself (in another mount namespace, deleted or replaced
        on disk since it started too); '' when there is none."""

    @abstractmethod
    def maps_text(self, recent: bool = False) -> str:
        """Its /proc/PID/maps text ('' when it is gone)."""

    @abstractmethod
    def exec_maps(self, recent: bool = False) -> list[Mapping]:
        """Its executable mappings."""

    @abstractmethod
    def read(self, address: int, size: int) -> bytes:
        """`size` bytes of its memory at `address`; MemoryReadError where they cannot be read."""

    @abstractmethod
    def map_file(self, mapping: Mapping) -> str:
        """A path that opens the file of its `mapping` as it maps it (no check: see mapped_file_path)."""

    @abstractmethod
    def map_file_at(self, start: int, end: int) -> str:
        """map_file of its mapping [start, end) ('' where it has none such)."""

    @abstractmethod
    def mapped_file_path(self, mapping: Mapping) -> str | None:
        """A path that opens the very file `mapping` maps, checked to be that file; None if none does."""

    @abstractmethod
    def root(self) -> str:
        """The prefix its files are opened under ('': none reaches them but map_file)."""

    @abstractmethod
    def root_is_host(self) -> bool:
        """Its root is the host's: its paths open the same files on the host."""

    @abstractmethod
    def mount_namespace(self) -> int:
        """The inode of its mount namespace (0: unknown)."""

    @abstractmethod
    def namespace_pid(self) -> int:
        """Its pid inside its own pid namespace."""

    @abstractmethod
    def labels(self, exe: bool, cwd: bool, commandline: bool, cgroup: bool) -> ProcessLabels | None:
        """The asked labels (labels.ProcessLabels); None when it cannot be read."""

    def exec_paths(self, recent: bool = False) -> str:
        """The paths of its executable mappings, one a line."""
        return "\n".join(m.path for m in self.exec_maps(recent))

    def all_mappings(self) -> list[Mapping]:
        """Every mapping it has (the executable ones and the rest)."""
        return parse_maps(self.maps_text())

    def is_current(self, start_time: int, image: tuple | None) -> bool:
        """The same process, running the same image, as one read with this start time and image."""
        stat = self.stat()
        return stat is not None and stat[0] == start_time and self.image() == image


class LiveProcess(Process):
    """A running process, by pid (made per use: it holds nothing but the pid)."""

    __slots__ = ("pid",)

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __repr__(self) -> str:
        return f"LiveProcess({self.pid})"

    def stat(self) -> tuple[int, str, int] | None:
        return identity.read_stat(self.pid)

    def image(self) -> tuple | None:
        return identity.exe_identity(self.pid)

    def exe_path(self, recent: bool = False) -> str:
        return mapped.exe_path(self.pid, recent)

    def exe_file(self) -> str:
        return identity.exe_file_path(self.pid)

    def maps_text(self, recent: bool = False) -> str:
        return mapped.read_maps_text(self.pid, recent)

    def exec_maps(self, recent: bool = False) -> list[Mapping]:
        return mapped.read_exec_maps(self.pid, recent)

    def read(self, address: int, size: int) -> bytes:
        if size <= 0:
            return b""
        check_span(address, size)
        return read_memory(self.pid, address, size)

    def map_file(self, mapping: Mapping) -> str:
        return mapped.map_file_path(self.pid, mapping)

    def map_file_at(self, start: int, end: int) -> str:
        return mapped.map_file_at(self.pid, start, end)

    def mapped_file_path(self, mapping: Mapping) -> str | None:
        return mapped.mapped_file_path(self.pid, mapping)

    def root(self) -> str:
        return mapped.root_path(self.pid)

    def root_is_host(self) -> bool:
        return mapped.same_root(self.pid)

    def mount_namespace(self) -> int:
        return identity.mount_namespace(self.pid)

    def namespace_pid(self) -> int:
        return identity.namespace_pid(self.pid)

    def labels(self, exe: bool, cwd: bool, commandline: bool, cgroup: bool) -> ProcessLabels | None:
        return process_labels(self.pid, exe, cwd, commandline, cgroup)


def as_process(process: Process | int) -> Process:
    """`process` itself, or the live process of a pid (for readers called with either)."""
    return LiveProcess(process) if isinstance(process, int) else process
