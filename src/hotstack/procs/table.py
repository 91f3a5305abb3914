"""ProcessTable: the processes seen during a run, by pid, refreshed on exec and pid reuse."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable

from .held_files import HeldFiles
from .identity import Announced, mount_namespace, read_start_time, read_stat
from .info import ProcessInfo, exec_changed, read_process
from .mapped import root_path
from .maps import Mapping, MappingIndex

log = logging.getLogger("hotstack.procs")
# Mappings kept from before a process's rereads. A process that swaps libraries back and forth (a
# plugin host) is read again at each change the kernel reports, and a read can fall between an
# unload and the next load. Keeping only the read before the last would leave all of an interval's
# samples of a library seen two reads ago unnamed (tests/kernels smoke: remap, under emulation).
EARLIER_MAPPINGS = 8
# The images of a process that execs again and again (itself, every fraction of a second) kept for
# its samples of an interval: the kernel stores a stack once for every image of the same files, with
# the addresses of the image that stored it first, so an interval's stacks are mostly its first
# images' addresses.
EXEC_IMAGES_KEPT = 64
# The parents of processes announced and gone before they were read, kept for naming (gone_parent).
GONE_PARENTS = 4096


class ProcessTable:
    """Processes seen during a run, by pid, refreshed on exec and pid reuse."""

    def __init__(self) -> None:
        self._by_pid: dict[int, ProcessInfo] = {}
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
        self._before_exec: dict[int, tuple[ProcessInfo, tuple]] = {}
        # pid -> its parent, of processes announced and gone before they could be read (no entry):
        # the parent names a leaf of the image before their exec (gone_parent); the latest
        # GONE_PARENTS kept
        self._gone_parents: dict[int, int] = {}

    def observe(self, pid: int, told: Announced | None = None) -> ProcessInfo | None:
        """Record a pid as soon as it is seen (cheap when already known and unchanged); `told`:
        what a program's announcement of it said, which spares the reads of its stat and mount
        namespace once an announcement was found to agree with them."""
        with self._lock:
            known = self._by_pid.get(pid)
        read_at = time.monotonic()     # before the reads: an exit after this is this process's
        announced = told
        if told is not None and not self._trust(pid, told):
            told = None
        stat = read_stat(pid) if told is None else (told.start_time, told.comm, told.ppid)
        if known is not None and stat is None:
            known.alive = False
            return known
        if known is not None and stat[0] == known.start_time and not exec_changed(known):
            return known
        self.maps_reads += 1
        # gone before it could be read: an attempt that found it gone (its stat is not read twice)
        info = read_process(pid, stat, told) if stat is not None else None
        if info is None:
            self.maps_gone += 1
            if announced is not None and known is None:
                self._note_gone_parent(pid, announced.ppid)
            return known if known is not None else self._gone_after_exec(pid)
        info.read_at = read_at
        info.held = self.held.hold(pid, info.mappings.mappings, info.root_is_host)
        with self._lock:
            if known is not None and known.held:
                self._retired.append(known.held)
            self._after_exec(info)
            self._by_pid[pid] = info
        return info

    def _note_gone_parent(self, pid: int, ppid: int) -> None:
        with self._lock:
            if len(self._gone_parents) >= GONE_PARENTS:
                for old in list(self._gone_parents)[:GONE_PARENTS // 2]:
                    del self._gone_parents[old]
            self._gone_parents[pid] = ppid

    def gone_parent(self, pid: int) -> int:
        """The parent its announcement named of a process gone before it could be read; 0: none known."""
        return self._gone_parents.get(pid, 0)

    def note(self, pid: int, told: Announced, parent: ProcessInfo) -> ProcessInfo:
        """Record a new process from its announcement alone, with no read of /proc: one of an image
        whose processes name no language runtime (a shell loop's commands, a compiler's passes),
        whose samples are mostly named by the kernel's file hash, with no mappings. Its container
        and root are its parent's (a child shares its parent's cgroup and mount namespace unless it
        moves: the caller notes only a child in its parent's mount namespace); its mappings are read
        when naming first needs them (settle)."""
        info = ProcessInfo(pid=pid, start_time=told.start_time, comm=told.comm, ppid=told.ppid,
                       container_id=parent.container_id, root=root_path(pid), root_is_host=parent.root_is_host,
                       mntns=told.mntns, lazy=True, told=told)
        with self._lock:
            self._after_exec(info)
            self._by_pid[pid] = info
        return info

    def settle(self, info: ProcessInfo) -> None:
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

    def adopt(self, info: ProcessInfo) -> bool:
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

    def enter(self, info: ProcessInfo) -> None:
        """Take a process read elsewhere as it is (a RecordedProcess's entry, in tests), in place
        of what is known of its pid."""
        with self._lock:
            self._by_pid[info.pid] = info

    def peek(self, pid: int) -> ProcessInfo | None:
        """What is known of `pid`, with no read (None if nothing is)."""
        return self._by_pid.get(pid)

    def known(self, pid: int) -> bool:
        with self._lock:
            return pid in self._by_pid

    def get(self, pid: int) -> ProcessInfo | None:
        # (no lock: a dict read is atomic, and naming asks once or twice a sample)
        known = self._by_pid.get(pid)
        return known if known is not None else self.observe(pid)

    # A process maps new code (dlopen, JIT) now and then; reread its maps for an unknown address,
    # but at most this often, since broken frame-pointer chains produce many addresses that
    # lie in no mapping at all.
    MAPS_REFRESH_S = 1.0

    def find_mapping(self, info: ProcessInfo, address: int) -> Mapping | None:
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
        stat = info.process.stat()
        if stat is None or stat[0] != info.start_time:
            info.alive = False
            return None
        fresh = info.process.exec_maps()
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
        fresh = info.process.exec_maps()
        self.maps_reads += 1
        index = MappingIndex(fresh)
        if fresh and [m.span for m in index.mappings] != [m.span for m in info.mappings.mappings]:
            info.earlier, info.mappings = (info.mappings, *info.earlier)[:EARLIER_MAPPINGS], index
            info.maps_read_at = info.remapped_at
            with self._lock:
                self._remapped.add(pid)
        return True

    def note_hole(self, info: ProcessInfo) -> None:
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

    def _after_exec(self, info: ProcessInfo) -> None:
        """A new entry of a pid that exec'ed: the images it left are its `earlier` mappings, and it
        is taken as remapped now (naming picks, by the kernel's file hash, the image each stack was
        walked in). Under the lock."""
        before = self._before_exec.pop(info.pid, None)
        if before is not None and before[0].start_time == info.start_time:
            info.earlier = before[1]
            info.remapped_at = time.monotonic()

    def _gone_after_exec(self, pid: int) -> ProcessInfo | None:
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
