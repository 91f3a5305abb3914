"""Process: what every layer knows of a process, read from /proc here and nowhere else.

A process is identified by (pid, start time): a pid that is reused by a new
process is a new entry, so two processes can never share cached maps or symbols.
Its image (the executable's device and inode) tells an exec apart. Maps are read
when a process is first seen, so a process that exits before the samples are
read still has its frames resolved.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from .containers import container_id_from_cgroup
from .held_files import HeldFiles
from .maps import Mapping, MappingIndex, dev_field, parse_maps, read_maps
from .proc_files import read_bytes, read_text


@dataclass
class Process:
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

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)

    def all_mappings(self) -> list[Mapping]:
        """Every mapping of the process now (not only the executable ones kept in `mappings`)."""
        return parse_maps(read_maps_text(self.pid))

    def is_current(self) -> bool:
        """The same process, running the same image, as when it was read."""
        return read_start_time(self.pid) == self.start_time and exe_identity(self.pid) == self.image


# The name the native unwinder (unwind/, another owner) still imports.
ProcessInfo = Process
# Mappings kept from before a process's rereads. A process that swaps libraries back and forth (a
# plugin host) is read again at each change the kernel reports, and a read can fall between an
# unload and the next load: with the one read before the last kept, a library seen two reads ago
# had all of its samples of an interval left unnamed (tests/kernels smoke: remap, under emulation).
EARLIER_MAPPINGS = 8
# The images of a process that execs again and again (itself, every fraction of a second) kept for
# its samples of an interval: the kernel stores a stack once for every image of the same files, with
# the addresses of the image that stored it first, so an interval's stacks are mostly its first
# images' addresses.
EXEC_IMAGES_KEPT = 64
log = logging.getLogger("hotstack.procs")


class Announced(NamedTuple):
    """What a program's announcement of a new process told of it (bpf/pids.h), from its main
    thread's task_struct at the sample: what /proc/PID/stat and /proc/PID/ns/mnt would say."""

    start_time: int      # clock ticks since boot, as /proc/PID/stat's
    comm: str            # the name of the image whose executable is exe_ino
    ppid: int
    mntns: int           # 0: not told
    exe_ino: int = 0     # 0: not told


# nanoseconds a clock tick of /proc/PID/stat's start time (the kernel's nsec_to_clock_t)
NS_PER_TICK = 10**9 // os.sysconf("SC_CLK_TCK")


def announced(start_ns: int, comm: bytes, ppid: int, mntns: int, exe_ino: int = 0) -> Announced | None:
    """The facts of an announcement record (None where it carries none: a start time of 0)."""
    if not start_ns:
        return None
    return Announced(start_ns // NS_PER_TICK, comm.split(b"\0", 1)[0].decode(errors="replace"), ppid, mntns,
                     exe_ino)


def read_stat(pid: int) -> tuple[int, str, int] | None:
    """(start time, comm, parent pid) of `pid` from /proc/PID/stat; None when it is gone. The comm
    is the one /proc/PID/comm shows (both print the task's name): one read serves both."""
    try:
        stat = read_bytes(f"/proc/{pid}/stat")
    except OSError:
        return None
    # comm may hold spaces and parens: the fields after it start at the last ')'.
    close = stat.rfind(b")")
    fields = stat[close + 2:].split()
    try:
        return int(fields[19]), stat[stat.find(b"(") + 1:close].decode(errors="replace"), int(fields[1])
    except (IndexError, ValueError):
        return None


def parent_pid(pid: int) -> int | None:
    """The pid of `pid`'s parent; None when it is gone."""
    stat = read_stat(pid)
    return stat[2] if stat is not None else None


def read_start_time(pid: int) -> int | None:
    stat = read_stat(pid)
    return stat[0] if stat is not None else None


def exe_identity(pid: int) -> tuple | None:
    """(device, inode) of the process's executable; None when it is gone."""
    try:
        st = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def mount_namespace(pid: int) -> int:
    """The mount namespace of a process (the inode number of /proc/PID/ns/mnt, as `ig` and
    `lsns` name it); 0 when it is gone or cannot be read."""
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return 0


def exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def exe_file_path(pid: int) -> str:
    """A path that opens the process's executable itself (the kernel's reference: valid in another
    mount namespace, deleted or replaced on disk)."""
    return f"/proc/{pid}/exe"


# The inode of the initial pid namespace (the kernel's PROC_PID_INIT_INO).
INIT_PID_NAMESPACE_INODE = 0xEFFFFFFC


@functools.cache
def own_host_pid() -> int:
    """This process's pid as the kernel's programs see it (in the host's pid namespace), or 0 where
    it runs in another namespace (there its pid may be another process's on the host). Read once:
    the engine and each sampler ask at start."""
    try:
        if os.stat("/proc/self/ns/pid").st_ino != INIT_PID_NAMESPACE_INODE:
            return 0
    except OSError:
        return 0
    return os.getpid()


def all_pids() -> list[int]:
    """Every process of this host (pid namespace) now."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


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
    return _remembered("maps", pid, recent, lambda: _read_text(f"/proc/{pid}/maps"))


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


def namespace_pid(pid: int) -> int:
    """The pid of a process inside its own pid namespace (the pid in its perf map's name)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return pid


def credentials(pid: int) -> tuple[int, int] | None:
    """The real user and group ids of a process (as bpf_get_current_uid_gid gives them), None if it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            uid = gid = None
            for line in f:
                if line.startswith(b"Uid:"):
                    uid = int(line.split()[1])
                elif line.startswith(b"Gid:"):
                    gid = int(line.split()[1])
                    break
    except (OSError, ValueError, IndexError):
        return None
    return (uid, gid) if uid is not None and gid is not None else None


@dataclass(frozen=True)
class ProcessLabels:
    """What discovery.process labels a process with, each read only when asked ("" when not)."""

    exe: str = ""
    cwd: str = ""
    commandline: str = ""       # its arguments joined by spaces
    cgroup: str = ""            # /proc/PID/cgroup as it reads


def process_labels(pid: int, exe: bool, cwd: bool, commandline: bool, cgroup: bool) -> ProcessLabels | None:
    """The asked parts of what discovery.process shows of `pid`; None when it cannot be read (gone,
    or a kernel thread, which has no executable)."""
    base = f"/proc/{pid}"
    try:
        return ProcessLabels(
            os.readlink(f"{base}/exe") if exe else "",
            os.readlink(f"{base}/cwd") if cwd else "",
            read_bytes(f"{base}/cmdline").decode(errors="replace").replace("\0", " ").strip() if commandline else "",
            read_bytes(f"{base}/cgroup").decode(errors="replace") if cgroup else "")
    except OSError:
        return None


def _read_text(path: str) -> str:
    try:
        return read_text(path)
    except OSError:
        return ""


def read_process(pid: int, stat: tuple[int, str, int] | None = None, told: Announced | None = None
                 ) -> Process | None:
    """What is known of `pid` now (None when it is gone); `stat`: its read_stat(), just read, or
    `told`: what its announcement said, standing for the stat where none is given (then a process
    with neither an executable nor an executable mapping is gone: a zombie, or exited since; and
    one whose executable is not the announced one exec'ed since: its name is read, the announced
    one was its last image's)."""
    if stat is None:
        stat = read_stat(pid) if told is None else (told.start_time, told.comm, told.ppid)
    if stat is None:
        return None
    exe = exe_path(pid)
    mappings = read_exec_maps(pid)
    image = exe_identity(pid)
    if told is not None:
        if not exe and not mappings:
            return None
        if image is None or image[1] != told.exe_ino:
            stat = read_stat(pid)
            if stat is None:
                return None
    return Process(
        pid=pid, start_time=stat[0], comm=stat[1], ppid=stat[2], exe=exe,
        container_id=_container_id(_read_text(f"/proc/{pid}/cgroup")),
        root=root_path(pid), root_is_host=_same_root(pid),
        mappings=MappingIndex(mappings),
        image=image, mntns=told.mntns if told is not None and told.mntns else mount_namespace(pid))


_container_ids: dict[str, str] = {}


def _container_id(cgroup_text: str) -> str:
    """container_id_from_cgroup, remembered per text: a host's processes share a few cgroups."""
    found = _container_ids.get(cgroup_text)
    if found is None:
        if len(_container_ids) >= 4096:
            _container_ids.clear()
        found = _container_ids[cgroup_text] = container_id_from_cgroup(cgroup_text)
    return found


def _exec_changed(info: Process) -> bool:
    """An exec keeps the pid and start time but replaces the image (and so the maps)."""
    try:
        return os.readlink(f"/proc/{info.pid}/exe") != info.exe
    except OSError:
        return False


_our_root: tuple[int, int] | None = None


def _same_root(pid: int) -> bool:
    global _our_root
    try:
        theirs = os.stat(f"/proc/{pid}/root")
        if _our_root is None:
            ours = os.stat("/")
            _our_root = (ours.st_dev, ours.st_ino)
    except OSError:
        return True
    return (theirs.st_dev, theirs.st_ino) == _our_root


class ProcessTable:
    """Processes seen during a run, by pid, refreshed on exec and pid reuse."""

    def __init__(self) -> None:
        self._by_pid: dict[int, Process] = {}
        self._lock = threading.Lock()
        # the executable mappings another layer kept of a process that exited before its maps were
        # read (the kernel unwinder's, sampling/engine.py): what a noted process gone before naming
        # needed its mappings is named with
        self.gone_mappings: Callable[[int], list[Mapping]] | None = None
        # the announcements of noted processes whose kept mappings lacked an address naming needed
        # (take_holes: the engine reads the next processes of such an image)
        self._holes: set[Announced] = set()
        # For metrics: reads of /proc/PID (its maps), and those that found the process gone.
        self.maps_reads = 0
        self.maps_gone = 0
        self._adopted = 0        # start times given to adopted processes: -1, -2, ...
        # pids whose maps, read again, hold files they did not map before (dlopen): the frame
        # sources look at them again (a library that embeds a runtime, loaded late)
        self._remapped: set[int] = set()
        # whether announcements tell what /proc says (checked on the first one: a start time in
        # another clock, a mount namespace the reads would not show, and they are not used); None:
        # not checked yet
        self._told_agrees: bool | None = None
        # descriptors of the files of processes whose files no host path reaches (a container's)
        self.held = HeldFiles()
        # the held files of entries replaced or forgotten since the last forget_dead (an exec, a
        # reused pid): given back there, after the samples they were taken for are named
        self._retired: list[tuple] = []
        # pid -> (its entry before it exec'ed its own executable again, the mappings of the images
        # it left, the latest first): the entry of its next image takes them as `earlier` (the
        # samples of those images are named with them, by the kernel's file hash)
        self._before_exec: dict[int, tuple[Process, tuple]] = {}

    def observe(self, pid: int, told: Announced | None = None) -> Process | None:
        """Record a pid as soon as it is seen (cheap when already known and unchanged); `told`:
        what a program's announcement of it said, which spares the reads of its stat and mount
        namespace once an announcement was found to agree with them."""
        with self._lock:
            known = self._by_pid.get(pid)
        read_at = time.monotonic()     # before the reads: an exit after this is this process's
        if told is not None and not self._trust(pid, told):
            told = None
        stat = read_stat(pid) if told is None else (told.start_time, told.comm, told.ppid)
        if known is not None and stat is None:
            known.alive = False
            return known
        if known is not None and stat[0] == known.start_time and not _exec_changed(known):
            return known
        self.maps_reads += 1
        # gone before it could be read: an attempt that found it gone (its stat is not read twice)
        info = read_process(pid, stat, told) if stat is not None else None
        if info is None:
            self.maps_gone += 1
            return known if known is not None else self._gone_after_exec(pid)
        info.read_at = read_at
        info.held = self.held.hold(pid, info.mappings.mappings, info.root_is_host)
        with self._lock:
            if known is not None and known.held:
                self._retired.append(known.held)
            self._after_exec(info)
            self._by_pid[pid] = info
        return info

    def note(self, pid: int, told: Announced, parent: Process) -> Process:
        """Record a new process from its announcement alone, with no read of /proc: one of an image
        whose processes name no language runtime (a shell loop's commands, a compiler's passes),
        whose samples are mostly named by the kernel's file hash, with no mappings. Its container
        and root are its parent's (a child shares its parent's cgroup and mount namespace unless it
        moves: the caller notes only a child in its parent's mount namespace); its mappings are read
        when naming first needs them (settle)."""
        info = Process(pid=pid, start_time=told.start_time, comm=told.comm, ppid=told.ppid,
                       container_id=parent.container_id, root=root_path(pid), root_is_host=parent.root_is_host,
                       mntns=told.mntns, lazy=True, told=told)
        with self._lock:
            self._after_exec(info)
            self._by_pid[pid] = info
        return info

    def settle(self, info: Process) -> None:
        """The mappings of a noted process (see note), read now: from /proc while it runs (with its
        executable and container, as a first read has them; then it is taken as remapped, so that
        the frame sources look at what it maps), else the ones the kernel kept (gone_mappings)."""
        if not info.lazy:
            return
        fresh = read_process(info.pid, told=info.told) if read_start_time(info.pid) == info.start_time else None
        if fresh is not None and fresh.start_time == info.start_time:
            info.exe, info.container_id, info.root_is_host = fresh.exe, fresh.container_id, fresh.root_is_host
            info.image, info.mappings = fresh.image, fresh.mappings
            info.held = self.held.hold(info.pid, info.mappings.mappings, info.root_is_host)
            with self._lock:
                self._remapped.add(info.pid)
        else:
            # gone: the kernel's mappings are named with host paths checked to open the very file
            mappings = self.gone_mappings(info.pid) if self.gone_mappings is not None else []
            info.root, info.root_is_host, info.alive, info.settled_gone = "", True, False, True
            info.mappings = MappingIndex(mappings)
        self.maps_reads += 1
        info.maps_read_at = time.monotonic()
        info.lazy = False

    def _trust(self, pid: int, told: Announced) -> bool:
        """Whether announcements can stand for /proc's reads: decided on the first one whose process
        /proc still shows (its start time and mount namespace compared; the parent is not, which
        may change at any time)."""
        if self._told_agrees is None:
            stat = read_stat(pid)
            if stat is None:
                return False
            mntns = mount_namespace(pid)
            self._told_agrees = stat[0] == told.start_time and (mntns == told.mntns or not told.mntns)
            if not self._told_agrees:
                log.info("announcements disagree with /proc (start time %d against %d, mount namespace "
                         "%d against %d): read from /proc", told.start_time, stat[0], told.mntns, mntns)
        return self._told_agrees

    def adopt(self, info: Process) -> bool:
        """Take a process known from elsewhere (it exited before its maps were read) unless its pid
        is known already. Give it a start time no process has (negative, unique) so that nothing
        cached for it is ever taken for another process's; it goes at the next forget_dead."""
        with self._lock:
            if info.pid in self._by_pid:
                return False
            self._adopted -= 1
            info.start_time = self._adopted
            info.alive = False
            self._by_pid[info.pid] = info
            return True

    def peek(self, pid: int) -> Process | None:
        """What is known of `pid`, with no read (None if nothing is)."""
        return self._by_pid.get(pid)

    def known(self, pid: int) -> bool:
        with self._lock:
            return pid in self._by_pid

    def get(self, pid: int) -> Process | None:
        # (no lock: a dict read is atomic, and naming asks once or twice a sample)
        known = self._by_pid.get(pid)
        return known if known is not None else self.observe(pid)

    # A process maps new code (dlopen, JIT) now and then; reread its maps for an unknown address,
    # but at most this often, since broken frame-pointer chains produce many addresses that
    # lie in no mapping at all.
    MAPS_REFRESH_S = 1.0

    def find_mapping(self, info: Process, address: int) -> Mapping | None:
        """The mapping of `address`; rereads the maps if the process may have mapped new code."""
        if info.lazy:
            self.settle(info)
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
        self.maps_reads += 1
        if fresh:
            before = {m.path for m in info.mappings.mappings}
            info.mappings = MappingIndex(fresh)
            if any(m.is_file and m.path not in before for m in fresh):
                with self._lock:
                    self._remapped.add(info.pid)
            found = info.mappings.find(address)
        return found

    def reread(self, pid: int, changed: tuple[int, int]) -> bool:
        """The kernel saw `pid` map another file (or offset) in `changed` (start, end) than it had met
        there: the process is marked (naming checks its stacks), its maps are read again and those
        before kept in `before`, for the addresses sampled before the change. The maps read may
        show no change (the process changed them back before this read): then only the mark.
        True if the process was known."""
        with self._lock:
            info = self._by_pid.get(pid)
        if info is None:
            return False
        self.settle(info)
        info.remapped_at = time.monotonic()
        info.changed = (info.changed + (changed,))[-8:]
        if not info.alive:
            return True
        fresh = read_maps(pid)
        self.maps_reads += 1
        index = MappingIndex(fresh)
        if fresh and [m.span for m in index.mappings] != [m.span for m in info.mappings.mappings]:
            info.earlier, info.mappings = (info.mappings, *info.earlier)[:EARLIER_MAPPINGS], index
            info.maps_read_at = info.remapped_at
            with self._lock:
                self._remapped.add(pid)
        return True

    def note_hole(self, info: Process) -> None:
        """A stack of a noted process, gone when its mappings were needed, walked by the kernel in
        files (every frame) but not named with the mappings the kernel kept for it: one was lost."""
        if info.settled_gone and info.told is not None:
            with self._lock:
                self._holes.add(info.told)

    def take_holes(self) -> set[Announced]:
        """The announcements of noted processes named with mappings that lacked an address (the
        kernel keeps the mappings it walked in a small cache, where one can push another out)."""
        with self._lock:
            taken, self._holes = self._holes, set()
        return taken

    def take_remapped(self) -> set[int]:
        """The pids that mapped new files since the last call (find_mapping read their maps again)."""
        with self._lock:
            taken, self._remapped = self._remapped, set()
        return taken

    def forget(self, pid: int, exec_of: int = 0) -> bool:
        """Drop what is known of `pid` (it exec'ed: the next observe reads the new image). `exec_of`:
        the inode of the executable it exec'ed; where that is its own again (a program that
        restarts itself), the mappings of the image it left (and those it kept of earlier ones)
        go to the entry of its next image, as its `earlier` mappings: then True."""
        with self._lock:
            info = self._by_pid.pop(pid, None)
            if info is None:
                return False
            if info.held:
                self._retired.append(info.held)
            ino = info.image[1] if info.image else (info.told.exe_ino if info.told else 0)
            if not exec_of or ino != exec_of:
                return False
            images = info.earlier if info.lazy else (info.mappings, *info.earlier)
            if images:
                if len(self._before_exec) >= 1024:
                    self._before_exec.clear()
                self._before_exec[pid] = (info, images[:EXEC_IMAGES_KEPT])
            return True

    def _after_exec(self, info: Process) -> None:
        """A new entry of a pid that exec'ed: the images it left are its `earlier` mappings, and it
        is taken as remapped now (naming picks, by the kernel's file hash, the image each stack was
        walked in). Under the lock."""
        before = self._before_exec.pop(info.pid, None)
        if before is not None and before[0].start_time == info.start_time:
            info.earlier = before[1]
            info.remapped_at = time.monotonic()

    def _gone_after_exec(self, pid: int) -> Process | None:
        """The entry of a process that exec'ed and exited before its new image was read: the
        images it left name their samples (`earlier`), its last one is named with the mappings
        the kernel kept (gone_mappings). None if it did not exec since it was known."""
        before = self._before_exec.get(pid)
        if before is None:
            return None
        mappings = self.gone_mappings(pid) if self.gone_mappings is not None else []
        info = dataclasses.replace(before[0], mappings=MappingIndex(mappings), root="", root_is_host=True,
                                   alive=False, lazy=False, held=(), image=None, exe="", changed=())
        with self._lock:
            if pid in self._by_pid:
                return self._by_pid[pid]
            self._after_exec(info)
            self._by_pid[pid] = info
        return info

    def forget_dead(self, gone: dict[int, float] | None = None) -> int:
        """Drop processes that have exited; call between intervals, after their samples are resolved.
        `gone`: the exits the kernel reported (pid -> time.monotonic() of the exit) when it reports
        every exit of the processes known here; then /proc is not read, and a process read after the
        exit of another under its pid (a reused pid) stays. None: each known process's start time
        is read again."""
        with self._lock:
            if gone is None:
                dead = [pid for pid, info in self._by_pid.items() if read_start_time(pid) != info.start_time]
            else:
                dead = [pid for pid, info in self._by_pid.items()
                        if not info.alive or gone.get(pid, 0.0) >= info.read_at]
            retired, self._retired = self._retired, []
            for pid in dead:
                retired.append(self._by_pid.pop(pid).held)
                self._before_exec.pop(pid, None)
        for keys in retired:
            self.held.release(keys)
        return len(dead)

    def held_path(self, mapping: Mapping) -> str | None:
        """A path that opens the file of `mapping` held for its process (see HeldFiles), or None."""
        return self.held.path(mapping.dev, mapping.inode) if len(self.held) else None

    def __len__(self) -> int:
        return len(self._by_pid)

    def __bool__(self) -> bool:
        # An empty table is still a table: `table or ProcessTable()` must not replace it.
        return True
