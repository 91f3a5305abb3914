"""The Engine: the one profiling core behind every front door and gadget.

Built from one validated EngineConfig, it owns the process table, the symbolizer, the frame
sources (runtimes) and one sampler per kind asked for (CPU, off-CPU, probes). `collect()`
drains every sampler and returns one Profile each.

What is sampled is decided in the kernel where the kernel can (pids, command names); what it
cannot (a front door's targets, e.g. the agent's by container id) is one predicate,
`set_target_filter`, applied here, in `wants()`, and nowhere else: a process it declines gets
no runtime frames, no symbols.

Threads: a pid watcher (every 100 ms) reads new processes' maps while they still run and lets
the frame sources look at them; an unwind thread builds the unwind tables of files the kernel
unwinder met without one (a first parse of a large binary can take a second). The watch of
processes is in process_watch.py, the threads' supervision in engine_threads.py.
"""

from __future__ import annotations

import logging
import os
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
from ..runtimes.registry import frame_sources, runtime_words
from .buffers import RawBatch
from .config import EngineConfig
from .cpu import CpuSampler
from .diagnose import check_preconditions, explain
from .engine_threads import ENGINE_THREADS, THREAD_FAILURES, EngineThreads
from .plain_images import PlainImages
from .process_watch import WATCH_INTERVAL_S, ProcessWatch
from .runtime_maps import RuntimeMaps
from .sampler import Sampler, unwalked_pid
from .samples import SampleMaker
from .wakeup import Wakeup

__all__ = ["Engine", "TargetFilter", "THREAD_FAILURES"]

log = logging.getLogger("hotstack.engine")
TargetFilter = Callable[[int], bool]


class Engine(ProcessWatch, EngineThreads):
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
        self._plain_images = PlainImages()     # (_noted_from_announcement)
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
                self._offer_to_frame_sources(pid)

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
                        process = self._process_of(pid)
                        for source in self.runtimes:
                            if self._looked_at(source, process, first=True):
                                break
            collection = self.cpu.start()
            for source in self.runtimes:
                kernel = RuntimeMaps(collection, source.name, self.cpu.steps)
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
        if self._can_note_from_announcements():
            self._plain_images.quiet_in(self._started)
        self._spawn(self._watch_new_pids, "hotstack-pids")
        if any(s.native is not None for s in self._started):
            self._spawn(self._serve_native_loop, "hotstack-unwind")

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
            batch.stats.runtimes_unread, batch.stats.runtimes_partly_read = UNREAD.take_new()
            with self._failures_lock:
                batch.stats.engine_failures, self._new_failures = self._new_failures, 0
            refused = self.processes.held.refused
            batch.stats.files_not_held, self._refused_seen = refused - self._refused_seen, refused
        return Profile(samples=samples, start_ns=batch.start_ns, duration_ns=batch.end_ns - batch.start_ns,
                       frequency_hz=sampler.frequency_hz, name=sampler.profile_name,
                       sample_type=sampler.sample_type, period_type=sampler.period_type, stats=batch.stats)

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
