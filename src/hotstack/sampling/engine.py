"""The Engine: the one profiling core behind every front door and gadget.

Built from one validated EngineConfig, it owns the process table, the symbolizer, the frame
sources (runtimes) and one sampler per kind asked for (CPU, off-CPU, probes). `collect()` drains every sampler and returns one Profile each.

What is sampled is decided in the kernel where the kernel can (pids, command names); what it
cannot (a front door's targets, e.g. the agent's by container id) is one predicate,
`set_target_filter`, applied here, in `wants()`, and nowhere else: a process it declines gets
no runtime frames, no symbols.

Threads: a pid watcher (every 100 ms) reads new processes' maps while they still run and lets
the frame sources look at them; an unwind thread builds the unwind tables of files the kernel
unwinder met without one (a first parse of a large binary can take a second).
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable

from .. import malloc, procs
from ..ebpf import release_kernel_btf
from ..errors import EngineFailed, HotstackError
from ..procs import ProcessTable
from ..profile.model import Profile
from ..symbols.symbolizer import Symbolizer
from ..runtimes.common.files import UNREAD
from ..runtimes.registry import frame_sources, names_a_word, runtime_words
from .buffers import RawBatch
from .config import EngineConfig
from .cpu import CpuSampler
from .diagnose import check_preconditions, explain
from .plain_images import PlainImages
from .runtime_maps import RuntimeMaps, urgent
from .sampler import Sampler, unwalked_pid
from .samples import SampleMaker
from .wakeup import Wakeup

log = logging.getLogger("hotstack.engine")
THREAD_FAILURES = 5       # failures of one background thread before the engine gives up
ENGINE_THREADS = ("hotstack-kallsyms", "hotstack-pids", "hotstack-unwind")   # (the names _spawn gives)



WATCH_INTERVAL_S = 0.1
# The pause after a wake-up that comes out of a quiet spell (none in the last WATCH_INTERVAL_S): the
# records of a fork and its exec come a millisecond or two apart and are served by one round this
# soon after, while the new process is in its loader or its runtime's start. A runtime listed then
# has its frames from its first samples on (a 0.15 s Python run lost its first ~100 ms to the
# burst pause). Wake-ups within WATCH_INTERVAL_S of the last one are a burst: WATCH_INTERVAL_S.
FIRST_PAUSE_S = 0.01
RUNTIME_COMMS = 64
# With nothing queued by the programs (they wake us: bpf/pids.h wake_userspace) and no runtime
# process to name frames of, the watcher sleeps this long: an idle host costs no polling.
IDLE_WAIT_S = 1.0
# The unwind thread's look at the kernel's queues without a kick, this often: work queued comes with
# a record that wakes the pid watcher, which kicks it (a ring found full counts as one), so the look
# is a fallback. Once a second it would be ~20 wake-ups and queue reads a 20 s, ~2.5 ms of CPU under
# load.
UNWIND_IDLE_WAIT_S = 10.0
# Exits are reported by the programs; /proc is still read for every known process this often.
FULL_CHECK_S = 60.0
TargetFilter = Callable[[int], bool]


class Engine:
    def __init__(self, config: EngineConfig, *, processes: ProcessTable | None = None,
                 symbolizer: Symbolizer | None = None, watch_interval_s: float = WATCH_INTERVAL_S) -> None:
        self.config = config.validate()
        self.processes = processes if processes is not None else ProcessTable()
        self.symbolizer = symbolizer if symbolizer is not None else Symbolizer(
            self.processes, demangle=config.demangle, go_symbols=config.go_symbols)
        self.samplers: list[Sampler] = []
        self.cpu: CpuSampler | None = None
        if config.cpu:
            self.cpu = CpuSampler(config)
            self.samplers.append(self.cpu)
        if config.off_cpu_threshold > 0:
            from .offcpu import OffCpuSampler
            self.samplers.append(OffCpuSampler(config))
        if config.probe_links:
            from .probes import ProbeSampler
            self.samplers.append(ProbeSampler(config))   # bad links fail here, before anything loads
        # Runtime frames come with the CPU sampler's walker (bpf/python.h ...).
        self.runtimes = frame_sources(config.runtime_frames, config.runtimes_off) if self.cpu is not None else []
        self._samples = SampleMaker(self.symbolizer, self.processes, self.runtimes)
        self._runtime_words = runtime_words(self.runtimes)
        self._plain_images = PlainImages()     # (_noted)
        self.processes.gone_mappings = self._gone_mappings
        # hotstack itself: the programs walk no user stack of it, so no frame source follows it
        self._unwalked = unwalked_pid(config)
        self._wants: TargetFilter | None = None
        self._declined: set[int] = set()
        # the pid watcher adds to _declined while a collect (another thread) prunes it
        self._declined_lock = threading.Lock()
        self._watch_interval = watch_interval_s
        self._stop = threading.Event()
        # failures inside the engine by where: a background thread that raised (restarted until
        # THREAD_FAILURES), a frame source that raised on a process
        self.failures: dict[str, int] = dict.fromkeys(ENGINE_THREADS, 0)
        self._failures_seen: set[tuple[str, str]] = set()
        self._new_failures = 0
        self._failures_lock = threading.Lock()
        self.failure = ""               # why the engine stopped working (a thread gave up), or ""
        self._refused_seen = 0          # processes.held.refused at the last profile
        self._stop_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)   # wakes the pid watcher's epoll
        self._native_kick = Wakeup()        # the pid watcher wakes the unwind thread
        self._runtime_kernels: list[RuntimeMaps] = []
        # comms of the processes found to run a runtime (python3, node ...), at most RUNTIME_COMMS:
        # a new process announced with one ends the pid watcher's pause (_pause)
        self._runtime_comms: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._started: list[Sampler] = []
        self._lock = threading.Lock()     # one drain at a time
        self._full_check_at = time.monotonic()
        self.closed = False      # close() ran: its samplers' maps and programs are gone

    # -- what is profiled --------------------------------------------------------------------
    def set_target_filter(self, wants: TargetFilter | None) -> None:
        """Userspace part of the filter: only pids `wants(pid)` are worked on (None: all).
        A pid declined earlier is reconsidered when the filter changes."""
        self._wants = wants
        with self._declined_lock:
            declined = list(self._declined)
        for pid in declined:
            if wants is None or wants(pid):
                with self._declined_lock:
                    self._declined.discard(pid)
                self._take_on(pid)

    def set_kernel_pids(self, pids) -> None:
        """With `pids_at_run_time`: the programs sample only these pids from now on (None: every
        pid). For a front door whose targets are known pids (the agent's, by pid); what it wants
        beyond pids stays `set_target_filter`'s."""
        for sampler in self.samplers:
            sampler.set_kernel_pids(pids)

    def wants(self, pid: int) -> bool:
        wants = self._wants
        if wants is None or wants(pid):
            return True
        with self._declined_lock:
            self._declined.add(pid)
        return False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Load and attach every sampler; a failure closes what started and is one HotstackError."""
        try:
            check_preconditions(self.config.kernel_version_check)
            self._start()
        except Exception as e:   # loader failures become one line
            self.close()
            raise e if isinstance(e, HotstackError) else explain(e) from None

    def _start(self) -> None:
        if self.cpu is not None:
            # Running processes are looked at by the frame sources before sampling starts.
            for pid in self.config.pids:
                self.processes.observe(pid)
            if self.runtimes:
                for pid in self.config.pids or procs.all_pids():
                    if self.wants(pid) and pid != self._unwalked:
                        for source in self.runtimes:
                            if self._looked_at(source, pid, first=True):
                                break
            collection = self.cpu.start()
            for source in self.runtimes:
                kernel = RuntimeMaps(collection, source.name)
                self._runtime_kernels.append(kernel)
                source.attach(kernel)
            self._started.append(self.cpu)
            self.cpu.attach()
        for sampler in self.samplers:
            if sampler is not self.cpu:
                sampler.start()
                self._started.append(sampler)
        release_kernel_btf()    # 5.5 MB that sampling does not need; read again if a program later does
        malloc.trim()           # and the start's transients (BTF, ELF reads) go back
        # The kernel's symbols once sampling is on: the first collect names kernel frames (and waits
        # for them if it comes first), nothing before it does. Parsed beside the programs' loads, they
        # would be ~0.1 CPU-s of the ~0.5 CPU-s a start costs before the first sample (bench/startup.py).
        self._spawn(self._load_kernel_symbols, "hotstack-kallsyms")
        if self._notes_by_announcement():
            self._plain_images.quiet_in(self._started)
        self._spawn(self._watch_new_pids, "hotstack-pids")
        if any(s.native is not None for s in self._started):
            self._spawn(self._serve_native_loop, "hotstack-unwind")

    def _load_kernel_symbols(self) -> None:
        self.symbolizer.kernel        # (loaded under the symbolizer's lock: a collect waits for it)
        malloc.trim()                 # the parse's chunks go back

    def _spawn(self, target, name: str) -> None:
        thread = threading.Thread(target=self._supervised, args=(target, name), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _supervised(self, target, name: str) -> None:
        """Run a background thread's loop; one that raises is logged, counted and run again, after
        a pause that grows with each failure. After THREAD_FAILURES of them the engine has failed:
        its next collect raises EngineFailed, so that a front door ends (or starts a new session) instead
        of going on without new processes or unwind tables and saying nothing."""
        failures = 0
        while not self._stop.is_set():
            try:
                target()
                return
            except Exception as e:      # whatever it is: said, counted, and the thread runs again
                failures += 1
                self._count_failure(name, f"{type(e).__name__}: {e}")
                last = failures >= THREAD_FAILURES
                log.error("engine thread %s failed (%s: %s); %s", name, type(e).__name__, e,
                          "giving up: the engine stops" if last else "restarted")
                log.debug("engine thread %s failed", name, exc_info=True)
                if last:
                    self.failure = f"engine thread {name} failed {failures} times, last: {type(e).__name__}: {e}"
                    return
                self._stop.wait(min(0.1 * 2 ** failures, 2.0))

    def stop(self) -> None:
        """Stop sampling (perf events off, links detached); what was counted stays readable."""
        self._stop.set()
        self._native_kick.set()
        if self._stop_fd >= 0:
            os.eventfd_write(self._stop_fd, 1)
        for thread in self._threads:
            thread.join(timeout=1)
        self._threads = []
        for sampler in self.samplers:
            sampler.stop()

    def close(self) -> None:
        """Release every link, program, map and perf event of every sampler (a reader of its
        counters checks `closed` first)."""
        self.closed = True
        self.stop()
        for kernel in self._runtime_kernels:      # (their rings' mappings, before the maps go)
            kernel.close()
        self._runtime_kernels = []
        for sampler in self.samplers:
            try:
                sampler.close()
            except Exception:   # closing must reach every sampler
                pass
        self._started = []
        if self._stop_fd >= 0:
            os.close(self._stop_fd)
            self._stop_fd = -1
        self._native_kick.close()

    def __enter__(self) -> "Engine":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
        an exec's record waited 15-170 ms for it, a 0.15 s Python run's first third."""
        waiter = select.epoll()
        # the pause after a wake-up waits on the stop descriptor alone (as sampling/wakeup.py: a
        # timed Event.wait had cost ~80 us of CPU a round on a loaded host, this ~45)
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
                # syscall. Most wake-ups announce new pids, and waking that thread to find nothing
                # had cost a thread switch and its two map reads at every round (it waits
                # UNWIND_IDLE_WAIT_S at most, and looks at the queues then)
                if woken and any(sampler.native_work_announced() for sampler in self._started):
                    self._native_kick.set()
                # The next round when a source wants it (a naming pass, a retry), at most IDLE_WAIT_S
                # and at least two WATCH_INTERVAL_S away unless a program wakes us; after a wake-up,
                # WATCH_INTERVAL_S more (one round serves a burst). Each wake-up of this thread
                # costs ~130 us of CPU on a loaded host, so rounds come when a source has something
                # to do, not at a fixed rate while runtime processes are followed. A round that
                # took new processes is not followed by another of its own: what comes next wakes
                # us, a retry it needs is a source's poll_in (a round 0.2 s after each would be
                # half of the rounds under a loop of short commands).
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
                if self._noted(pid, told):
                    self.wants(pid)
                    continue
                info = self.processes.observe(pid, told)
                if self.wants(pid):
                    if self._take_on(pid):
                        self._plain_images.learn(told, info)
                    elif told is not None and told.comm not in self._runtime_comms \
                            and len(self._runtime_comms) < RUNTIME_COMMS:
                        self._runtime_comms.add(told.comm)
                        for each in self._started:
                            each.mark_runtime_comm(told.comm)
                    sampler.native_process(pid, info)
            busy = self._observe_remaps(sampler) or busy
        # processes that mapped new files (dlopen) after they were looked at: a runtime may have
        # come with them (the frame sources retry only processes that named a runtime already)
        for pid in self.processes.take_remapped():
            if self.wants(pid) and not self._take_on(pid):
                info = self.processes.peek(pid)
                if info is not None and info.told is not None:
                    self._plain_images.runs_runtime(info.told)
        # images whose noted processes exited with mappings the kernel's cache had lost: read
        for told in self.processes.take_holes():
            self._plain_images.lost_mappings(told)
        return busy

    def _noted(self, pid: int, told) -> bool:
        """Whether a new process was noted from its announcement alone (ProcessTable.note), with no
        read of /proc: a process of an image met before naming no runtime (plain_images.py), in its
        parent's mount namespace, where every sampler's kernel unwinder keeps the mappings it walks
        (what names its stacks if it exits before naming needs them). A loop of short commands had
        cost ~0.3 ms of the pid watcher a command, most of it reads of /proc that the kernel's file
        hash makes unneeded: the stacks of files other processes of the image had are named by it."""
        if told not in self._plain_images or not self._notes_by_announcement():
            return False
        if self.processes.peek(pid) is not None:
            return False
        # (the parent is read once if it was not: a loop's shell, a build's make)
        parent = self.processes.get(told.ppid) if told.ppid > 1 else None
        if parent is None or parent.mntns != told.mntns:
            return False
        self.processes.note(pid, told, parent)
        return True

    def _notes_by_announcement(self) -> bool:
        """Whether processes can be noted (_noted): every sampler's kernel unwinder walks the VMAs
        itself and keeps the mappings it walked (6.1+)."""
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

    def _take_on(self, pid: int) -> bool:
        """A wanted process: runtime frames if it runs one. The sources' first tests are made here
        at once, on the paths of its executable and of its executable mappings (the reads of this
        round): a process that names no runtime (most of a host's) is looked at by none of them,
        where each source's own tests (and retry decision) would be a dozen calls for every new
        process, a quarter of the pid watcher's time for one under a loop of short commands.
        True if it names no runtime (a plain process)."""
        if pid == self._unwalked:
            return False
        if not self.runtimes:
            return True
        words = self._runtime_words
        if words is not None and not names_a_word(words, pid):
            return True
        for source in self.runtimes:
            if self._looked_at(source, pid):
                break
        return False

    def _looked_at(self, source, pid: int, first: bool = False) -> bool:
        """source.detect(pid) (`first`: before sampling starts) or source.observe(pid). A source that
        raises on a process (a shape of it the source did not expect) leaves that process without
        its runtime's frames, said once per source and error and counted, and the rest goes on:
        one process must not stop sampling of the host."""
        try:
            return source.detect(pid) if first else source.observe(pid)
        except Exception as e:
            where = f"{source.name} frame source"
            first_time = self._count_failure(where, f"{type(e).__name__}: {e}")
            if first_time:
                log.error("the %s failed on pid %d (%s: %s): that process has no %s frames; "
                          "please report this", where, pid, type(e).__name__, e, source.name)
                log.debug("the %s failed on pid %d", where, pid, exc_info=True)
            return False

    def _count_failure(self, where: str, what: str) -> bool:
        """Count a failure inside the engine; True the first time this one (where, what) is met."""
        with self._failures_lock:
            self.failures[where] = self.failures.get(where, 0) + 1
            self._new_failures += 1
            first = (where, what) not in self._failures_seen
            self._failures_seen.add((where, what))
        return first

    def _serve_native_loop(self) -> None:
        """Tables for the files the kernel unwinder queued. Its own thread, apart from the pid
        watcher: a first parse of a large binary can take a second, and new processes' maps must
        be read before they exit all the same."""
        for sampler in self._started:
            try:
                sampler.preload_native_shared()
            except Exception:    # (not loaded now, the kernel queues them as it meets them)
                if sampler.collection is None:   # closing under us
                    return
        waiting = False
        while not self._stop.is_set():
            # files still waiting for a build go on at once; else the pid watcher's kick after a
            # round, or UNWIND_IDLE_WAIT_S
            kicked = waiting or self._native_kick.wait(UNWIND_IDLE_WAIT_S)
            if waiting:
                self._native_kick.clear()
            waiting = False
            for sampler in self._started:
                # at a timeout, a look at the queues first (one syscall a map): a serve reads them
                # whole, ~0.2 ms of CPU a second for nothing on a host where every file has its table
                if not kicked and not sampler.native_queued():
                    continue
                try:
                    waiting = sampler.serve_native() or waiting
                except Exception:
                    if sampler.collection is None:   # closing under us
                        return

    # -- collecting ----------------------------------------------------------------------------
    def collect(self) -> list[Profile]:
        """One profile per sampler, of everything sampled since the last collect. EngineFailed once
        a background thread has failed THREAD_FAILURES times."""
        if self.failure:
            raise EngineFailed(self.failure)
        with self._lock:
            self.observe_new_pids()
            batches = []
            for sampler in self._started:
                batch = sampler.collect()
                if sampler is self.cpu:
                    for source in self.runtimes:
                        source.collect(sampler.buffers.active ^ 1)   # runtime stacks of the buffer drained
                batches.append((sampler, batch))
                # (a change the kernel saw in the samples just drained, before they are named)
                self._observe_remaps(sampler)
            profiles = [self.to_profile(sampler, batch) for sampler, batch in batches]
            self._samples.next_interval()
            self._forget_dead()
            self.symbolizer.release_file_pages()
            return profiles

    def to_profile(self, sampler: Sampler, batch: RawBatch) -> Profile:
        wants = self._wants
        samples = []
        truncated = 0
        out_of_scope = 0
        if sampler.native is not None:
            self._adopt_exited(sampler, batch)
        for raw in batch.stacks:
            if wants is not None and raw.pid and not wants(raw.pid):
                out_of_scope += raw.value
                continue
            sample, cut = self._samples.sample(raw, sampler.strips_bpf_frames)
            samples.append(sample)
            truncated += sample.value if cut else 0
        batch.stats.truncated = truncated
        batch.stats.out_of_scope = out_of_scope
        if sampler is self.cpu:
            batch.stats.runtimes_unread = UNREAD.take_new()
            with self._failures_lock:
                batch.stats.engine_failures, self._new_failures = self._new_failures, 0
            refused = self.processes.held.refused
            batch.stats.files_not_held, self._refused_seen = refused - self._refused_seen, refused
        return Profile(samples=samples, start_ns=batch.start_ns, duration_ns=batch.end_ns - batch.start_ns,
                       frequency_hz=sampler.frequency_hz, name=sampler.profile_name,
                       sample_type=sampler.sample_type, period_type=sampler.period_type, stats=batch.stats)

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
                self.processes.adopt(procs.Process(pid=pid, start_time=0, comm=raw.comm,
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

    # -- running -------------------------------------------------------------------------------
    def run(self, duration_s: float, interval_s: float = 0, on_profile: Callable[[Profile], None] | None = None,
            stop: threading.Event | None = None) -> Profile | None:
        """Collect for `duration_s` (0 = until `stop`), emitting profiles every `interval_s`
        (0 = once at the end). Returns the last profile of the first sampler."""
        stop = stop or threading.Event()
        deadline = time.monotonic() + duration_s if duration_s > 0 else None
        last = None
        while True:
            wait = [interval_s] if interval_s > 0 else []
            if deadline is not None:
                wait.append(max(0.0, deadline - time.monotonic()))
            finished = stop.wait(min(wait)) if wait else stop.wait()
            expired = deadline is not None and time.monotonic() >= deadline
            if finished or expired:
                for sampler in self.samplers:
                    sampler.stop()   # flush on stop: nothing may arrive after the final drain
            if finished or expired or interval_s > 0:
                profiles = self.collect()
                last = profiles[0] if profiles else None
                for profile in profiles:
                    if on_profile is not None:
                        on_profile(profile)
            if finished or expired:
                return last

    def bpf_run_time_ns(self) -> int:
        """Kernel time of the CPU sampler's program (0 without it or without run-time stats)."""
        return self.cpu.bpf_run_time_ns() if self.cpu is not None else 0
