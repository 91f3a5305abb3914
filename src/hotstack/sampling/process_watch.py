"""The Engine's watch of processes coming and going: the pid watcher's loop, what a new process
is offered to (the frame sources, the kernel unwinder), the processes noted from an announcement
alone, and the forgetting of those that exited.

`ProcessWatch` is a part of `Engine` (engine.py); it uses the engine's process table, samplers,
frame sources and target filter.
"""

from __future__ import annotations

import logging
import select
import time

from .. import procs
from ..runtimes.common.files import UNREAD
from ..runtimes.registry import names_a_word
from .buffers import RawBatch
from .runtime_maps import urgent
from .sampler import Sampler

log = logging.getLogger("hotstack.engine")
WATCH_INTERVAL_S = 0.1
# The pause after a wake-up that comes out of a quiet spell (none in the last WATCH_INTERVAL_S): the
# records of a fork and its exec come a millisecond or two apart and are served by one round this
# soon after, while the new process is in its loader or its runtime's start. A runtime listed then
# has its frames from its first samples on (with the burst's pause, a 0.15 s Python run loses its
# first ~100 ms). Wake-ups within WATCH_INTERVAL_S of the last one are a burst: WATCH_INTERVAL_S.
FIRST_PAUSE_S = 0.01
RUNTIME_COMMS = 64
# With nothing queued by the programs (they wake us: bpf/pids.h wake_userspace) and no runtime
# process to name frames of, the watcher sleeps this long: an idle host costs no polling.
IDLE_WAIT_S = 1.0
# Exits are reported by the programs; /proc is still read for every known process this often.
FULL_CHECK_S = 60.0


class ProcessWatch:
    """New processes (read, offered to the frame sources, or noted), exec'ed and exited ones."""

    # -- new processes -------------------------------------------------------------------------
    def _watch_new_pids(self) -> None:
        """New pids (their maps read while they run), then the unwind thread kicked; between rounds
        at least WATCH_INTERVAL_S (one round serves a burst), at most IDLE_WAIT_S unless a program
        wakes us or a frame source wants a round sooner (`poll_in`: its next naming pass, a retry)."""
        with urgent():
            self._watch_rounds()

    def _watch_rounds(self) -> None:
        """_watch_new_pids's rounds, at a raised priority: a new process is read, and a runtime's
        listed, while it starts, on a host whose CPUs are busy too. The thread sleeps between
        rounds, and a round is short (~0.1-0.3 ms); on a loaded 2-CPU host, at the default priority,
        an exec's record waits 15-170 ms for it, a 0.15 s Python run's first third."""
        waiter = select.epoll()
        # the pause after a wake-up waits on the stop descriptor alone (as sampling/wakeup.py does):
        # it costs about half the CPU of a timed Event.wait on a loaded host
        pause = select.epoll()
        # ... or on the rings too, to end the pause at a runtime's new process (_pause)
        pause_rings = select.epoll()
        try:
            for epoll in (pause, pause_rings, waiter):
                epoll.register(self._stop_fd, select.EPOLLIN)
            for sampler in self._started:
                fd = sampler.wakeup_fd()
                if fd is not None:
                    waiter.register(fd, select.EPOLLIN)
                    pause_rings.register(fd, select.EPOLLIN)
            woken = True        # the first round serves what was queued before this thread ran
            last_woken = 0.0
            while not self._stop.is_set():
                # (each sampler's new_pids reads its ring, which epoll reports readable until read)
                self._observe_pids()
                self._poll_runtimes()
                # the unwind thread is kicked only when a program queued work for it (a file
                # without a table, a stale mapping list): its record in the ring tells, with no
                # syscall. Most wake-ups announce new pids only, and waking that thread for nothing
                # costs a thread switch and two map reads (it waits UNWIND_IDLE_WAIT_S at most,
                # and looks at the queues then).
                if woken and any(sampler.native_work_announced() for sampler in self._started):
                    self._native_kick.set()
                # The next round when a source wants it (a naming pass, a retry), at most IDLE_WAIT_S
                # and at least two WATCH_INTERVAL_S away unless a program wakes us; after a wake-up,
                # WATCH_INTERVAL_S more (one round serves a burst). Each wake-up of this thread
                # costs ~130 us of CPU on a loaded host, so rounds come when a source has something
                # to do, not at a fixed rate while runtime processes are followed. A round that
                # took new processes is not followed by another of its own. What comes next wakes
                # us, and a retry it needs is a source's poll_in: a round 0.2 s after each would
                # be half of the rounds under a loop of short commands.
                woken = bool(waiter.poll(max(2 * self._watch_interval, self._next_round_in())))
                if woken:
                    now = time.monotonic()
                    burst = now - last_woken < self._watch_interval
                    last_woken = now
                    if self._pause(self._watch_interval if burst else FIRST_PAUSE_S, pause, pause_rings):
                        break
        except (OSError, ValueError):
            if self._stop.is_set() or any(s.collection is None for s in self._started):
                return      # a sampler closed under us
            raise           # anything else is a failure of this thread (_supervised)
        finally:
            waiter.close()
            pause.close()
            pause_rings.close()

    def _pause(self, seconds: float, pause, pause_rings) -> bool:
        """The pause after a wake-up (True: stop). It ends early when a program announces a process
        whose comm is one a runtime's processes had (python3, node, java ...: _runtime_comms): the
        runtime is listed while it starts, not a burst's pause later. The rings are looked at at
        most every FIRST_PAUSE_S (what they announce is kept for the next round), so a burst of
        other processes wakes this thread at most that often."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not self._runtime_comms:
                return bool(pause.poll(left)) or self._stop.is_set()
            if not pause_rings.poll(left):
                return False
            if self._stop.is_set():
                return True
            if any(told is not None and told.comm in self._runtime_comms
                   for sampler in self._started for told in sampler.clear_wakeups()):
                return False
            if pause.poll(min(FIRST_PAUSE_S, deadline - time.monotonic())) or self._stop.is_set():
                return True

    def _learn_runtime_comm(self, told) -> None:
        """A process that names a runtime: its comm is announced at the exec of the next one
        (bpf/pids.h runtime_comms) and ends the pid watcher's pause (_pause). Not hotstack's own
        process, which is offered to no frame source: with its comm (python), every exec of that
        name would be announced at once."""
        if told is None or told.comm in self._runtime_comms or len(self._runtime_comms) >= RUNTIME_COMMS:
            return
        self._runtime_comms.add(told.comm)
        for sampler in self._started:
            sampler.mark_runtime_comm(told.comm)

    def observe_new_pids(self) -> bool:
        """True if there was something to do, or runtime processes are being followed."""
        came = self._observe_pids()
        return self._poll_runtimes() or came

    def _observe_pids(self) -> bool:
        """The processes the programs announced, read and taken on; True if any came."""
        busy = False
        for sampler in self._started:
            try:
                pids = sampler.new_pids()
            except Exception:   # the sampler is closing under us
                continue
            busy = busy or bool(pids)
            for pid, exec_ed, told in pids:
                if exec_ed:
                    self._forget_image(pid, told)
                if self._noted_from_announcement(pid, told):
                    self.wants(pid)
                    continue
                info = self.processes.observe(pid, told)
                if self.wants(pid):
                    if self._offer_to_frame_sources(pid):
                        self._plain_images.learn(told, info)
                    elif pid != self._unwalked:
                        self._learn_runtime_comm(told)
                    sampler.native_process(pid, info)
            busy = self._observe_remaps(sampler) or busy
        # processes that mapped new files (dlopen) after they were looked at: a runtime may have
        # come with them (the frame sources retry only processes that named a runtime already)
        for pid in self.processes.take_remapped():
            if self.wants(pid) and not self._offer_to_frame_sources(pid):
                info = self.processes.peek(pid)
                if info is not None and info.told is not None:
                    self._plain_images.runs_runtime(info.told)
        # images whose noted processes exited with mappings the kernel's cache had lost: read
        for told in self.processes.take_holes():
            self._plain_images.lost_mappings(told)
        return busy

    def _noted_from_announcement(self, pid: int, told) -> bool:
        """Whether a new process was noted from its announcement alone (ProcessTable.note), with no
        read of /proc: a process of an image met before naming no runtime (plain_images.py), in its
        parent's mount namespace, where every sampler's kernel unwinder keeps the mappings it walks
        (what names its stacks if it exits before naming needs them). Under a loop of short commands
        this saves the pid watcher ~0.3 ms a command, mostly reads of /proc that the kernel's file
        hash makes unneeded: the stacks of files other processes of the image had are named by it."""
        if told not in self._plain_images or not self._can_note_from_announcements():
            return False
        if self.processes.peek(pid) is not None:
            return False
        # (the parent is read once if it was not: a loop's shell, a build's make)
        parent = self.processes.get(told.ppid) if told.ppid > 1 else None
        if parent is None or parent.mntns != told.mntns:
            return False
        self.processes.note(pid, told, parent)
        return True

    def _can_note_from_announcements(self) -> bool:
        """Whether new processes can be noted from their announcement (_noted_from_announcement):
        every sampler's kernel unwinder walks the VMAs itself and keeps the mappings it walked (6.1+)."""
        return bool(self._started) and all(s.native is not None and s.native_vma_walk for s in self._started)

    def _gone_mappings(self, pid: int) -> list:
        """The mappings a sampler's kernel unwinder kept for `pid` (ProcessTable.gone_mappings)."""
        for sampler in self._started:
            if sampler.native is not None:
                found = sampler.native.exited_mappings(pid)
                if found:
                    return found
        return []

    def _observe_remaps(self, sampler: Sampler) -> bool:
        """The processes the kernel saw put another file where one was (their addresses name other
        code from then on): marked and read again; True if any."""
        busy = False
        for pid, start, end in sampler.native_remapped():
            if self.processes.reread(pid, (start, end)):
                busy = True
                sampler.native_process(pid, self.processes.get(pid))
        return busy

    def _poll_runtimes(self) -> bool:
        """Each frame source's naming pass; True if some source follows processes."""
        following = False
        if self.cpu is not None and self.cpu.buffers is not None:
            for source in self.runtimes:
                source.poll(self.cpu.buffers.active)
                following = following or source.tracking()
        return following

    def _next_round_in(self) -> float:
        """Seconds until a frame source wants the pid watcher's next round (IDLE_WAIT_S at most):
        the soonest of their `poll_in()`."""
        wait = IDLE_WAIT_S
        for source in self.runtimes:
            due = source.poll_in()
            if due is not None:
                wait = min(wait, due)
        return max(0.0, wait)

    def _forget_image(self, pid: int, told) -> None:
        """`pid` exec'ed: what was read of its old image (maps, runtime state) goes, and the new
        image is read as a new process is. A process that exec'ed its own executable again (a
        program that restarts itself, every fraction of a second): each image's mappings name its
        samples, so the processes of that image are read, not noted, and announced with a wake-up
        (the kernel's cache of its mappings is emptied at each exec)."""
        if self.processes.forget(pid, exec_of=told.exe_ino if told is not None else 0):
            self._plain_images.lost_mappings(told)
        UNREAD.forget(pid)
        for source in self.runtimes:
            source.forget(pid)

    def _offer_to_frame_sources(self, pid: int) -> bool:
        """Offer a wanted process to the frame sources (runtime frames if it runs one); True if it
        names no runtime (a plain process). The sources' first test is made here at once, on the
        paths of its executable and of its executable mappings (the reads of this round). A process
        that names no runtime (most of a host's) is looked at by none of them: each source's own
        tests and retry decision are a dozen calls, which for every new process would be a quarter
        of the pid watcher's time under a loop of short commands."""
        if pid == self._unwalked:
            return False
        if not self.runtimes:
            return True
        words = self._runtime_words
        process = self._process_of(pid)
        if words is not None and not names_a_word(words, process):
            return True
        for source in self.runtimes:
            if self._looked_at(source, process):
                break
        return False

    def _process_of(self, pid: int) -> procs.Process:
        """What the frame sources read `pid` through: the process table's entry's, else a live one."""
        info = self.processes.peek(pid)
        return info.process if info is not None and info.process is not None else procs.LiveProcess(pid)

    def _looked_at(self, source, process: procs.Process, first: bool = False) -> bool:
        """source.detect(process) (`first`: before sampling starts) or source.observe(process). A
        source that raises on a process (a shape of it the source did not expect) leaves that
        process without its runtime's frames, said once per source and error and counted, and the
        rest goes on: one process must not stop sampling of the host."""
        pid = process.pid
        try:
            return source.detect(process) if first else source.observe(process)
        except Exception as e:
            where = f"{source.name} frame source"
            first_time = self._count_failure(where, f"{type(e).__name__}: {e}")
            if first_time:
                log.error("the %s failed on pid %d (%s: %s): that process has no %s frames; "
                          "please report this", where, pid, type(e).__name__, e, source.name)
                log.debug("the %s failed on pid %d", where, pid, exc_info=True)
            return False


    # -- exited processes ----------------------------------------------------------------------
    def _adopt_exited(self, sampler: Sampler, batch: RawBatch) -> None:
        """Processes that exited before the pid watcher read their maps (a short command on a
        loaded host): their frames are named from the mappings the kernel unwinder cached for
        them, where a path opens the very file (inode and device checked). Such a process is
        dead now, so its pid can only have been reused by another process that died as well
        within the interval."""
        seen = set()
        for raw in batch.stacks:
            # (the process whose addresses the user stack holds: the sample's, or another's)
            pid = raw.user_pid or raw.pid
            if not raw.user_stack or not pid or pid in seen:
                continue
            seen.add(pid)
            if self.processes.known(pid) or procs.exists(pid):
                continue
            mappings = sampler.native.exited_mappings(pid)
            if mappings:
                self.processes.adopt(procs.ProcessInfo(pid=pid, start_time=0, comm=raw.comm,
                                                       mappings=procs.MappingIndex(mappings)))

    def _forget_dead(self) -> None:
        """Processes that exited are forgotten: those the programs saw exit (bpf/exec.bpf.c), and at
        least every FULL_CHECK_S, or where the kernel does not report exits, all that /proc no
        longer shows. Reading the start time of every known process at every interval would be
        about a tenth of the process's CPU under a loop of short commands."""
        gone = self._gone_pids()
        self.processes.forget_dead(gone)
        for source in self.runtimes:
            source.forget_dead()
        with self._declined_lock:
            declined = list(self._declined)
        if gone is None:
            dead = [pid for pid in declined if not procs.exists(pid)]
        else:
            dead = [pid for pid in declined if pid in gone]
        with self._declined_lock:
            self._declined.difference_update(dead)

    def _gone_pids(self) -> dict[int, float] | None:
        """The exits every sampler saw since the last call (pid -> time), or None when /proc must
        be read: a sampler cannot tell, or FULL_CHECK_S passed since /proc was last read (a process
        known but never announced, e.g. listed at start and never sampled, exits unreported)."""
        gone: dict[int, float] | None = {} if self._started else None
        for sampler in self._started:
            exits = sampler.gone_pids()      # (drained either way)
            if exits is None or gone is None:
                gone = None
            else:
                for pid, at in exits.items():
                    gone[pid] = max(at, gone.get(pid, 0.0))
        now = time.monotonic()
        if gone is None or now - self._full_check_at >= FULL_CHECK_S:
            self._full_check_at = now
            return None
        return gone

