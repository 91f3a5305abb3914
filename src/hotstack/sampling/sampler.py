"""What every sampler shares: one loaded BPF collection that counts stacks (bpf/counts.h).

A sampler is the kernel half of one kind of profile (CPU, off-CPU, probes): it loads its
program with the engine's config, attaches it, and hands back raw batches. Symbols, frame
sources and Profiles are the engine's business (engine.py), never a sampler's.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time

from .. import ebpf, procs
from ..bpf import object_path, schema
from ..ebpf import links as ebpf_links
from ..profile.model import ValueType
from ..unwind import kernel_config
from ..unwind.kernel_maps import NativeTables
from .announcements import announcement_offsets, note_announced
from .buffers import RawBatch, StackBuffers, parse_native_stack, without_kernel_stacks
from .config import EngineConfig
from .obi import attach_trace_context
from .ringbuf import RingBuffer
from .runtime_maps import deferred_programs
from .step_programs import DEEP_SUFFIX, StepPrograms

_PID = struct.Struct("<I")
_ANNOUNCEMENT = schema.ANNOUNCEMENT.struct     # a record of the wakeups ring: pid, kind, what it tells
# new_pids drains the new_pids map at least this often (seconds): a pid whose record the kernel could
# not write (the ring full) waits there, and a ring found half full drains it at once
NEW_PIDS_DRAIN_S = 5.0
_U64 = struct.Struct("<Q")
# maps only unwind mode "kernel" uses (bpf/native_unwind.h, native_count.h): one entry each otherwise
_NATIVE_MAPS = ("nu_rows", "nu_rules", "nu_files", "nu_procs", "nu_missing", "nu_remap", "native_stacks_0", "native_stacks_1")
EXEC_PROGRAM = "hotstack_exec"     # bpf/exec.bpf.c: announces execs
EXIT_PROGRAM = "hotstack_exit"     # ... and exits
EXEC_SHARED_MAPS = ("filter_pids", "seen_pids", "new_pids", "gone_pids", "wakeups", "runtime_comms")
# filter_pids: its key 0 opens the filter to every pid (bpf/pids.h pid_allowed); a filter set at
# run time holds up to this many pids, and is left open for more
RUN_TIME_PIDS_MAX = 8192
_EVERY_PID = _PID.pack(0)
log = logging.getLogger("hotstack.sampling")


def unwalked_pid(config: EngineConfig) -> int:
    """The process whose user stacks are not walked: hotstack's own, unless asked for (0: none)."""
    own = procs.own_host_pid()
    return 0 if config.own_stacks or own in config.pids else own


class Sampler:
    object_name: str = ""          # bpf/<object_name>.bpf.o
    map_prefix: str = ""           # prefix of its global-data maps' names (they show in bpftool)
    profile_name: str = "process_cpu"
    sample_type: ValueType = ValueType("samples", "count")
    period_type: ValueType = ValueType("cpu", "nanoseconds")
    frequency_hz: int = 0          # 0: event-driven (one event stands for itself)
    # Stacks taken inside a BPF program (tracepoints, probes) start with the program's frames.
    strips_bpf_frames: bool = True

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.collection: ebpf.Collection | None = None
        self.buffers: StackBuffers | None = None
        self._links: list = []        # attached programs (probes, tracepoints)
        self.native: NativeTables | None = None   # unwind mode "kernel": the kernel unwinder's tables
        self.native_vma_walk = False               # the kernel finds each PC's mapping itself
        self.steps: StepPrograms | None = None     # the kernel unwinder's step program in nu_progs[0]
        self._exec: ebpf.Collection | None = None   # bpf/exec.bpf.c, on this program's pid maps
        self._mapped: ebpf.Collection | None = None   # bpf/mappings.bpf.c, on its nu_procs map
        self._exits_known = False                   # its exit program is attached (gone_pids fills)
        self._wakeups: RingBuffer | None = None     # the program's `wakeups` ring (bpf/pids.h)
        # the pids its records announced, not taken yet (pid -> (exec'ed, what its last record
        # told)), under _announce_lock
        self._ring_pids: dict[int, tuple[bool, procs.Announced | None]] = {}
        self._announce_lock = threading.Lock()
        # new_pids drains the new_pids map: the ring was found (half) full, where the program puts
        # the pids it cannot write there; True at first, for what was announced before anyone read
        self._announced = True
        self._drained_at = 0.0                      # when new_pids last drained that map
        # a record of work queued was read (or the ring found full) since the last look: for
        # native_remapped's queue, and for the pid watcher's kick of the unwind thread
        self._remap_due = True
        self._work_due = True
        self._kernel_pids: frozenset[int] | None = None  # pids_at_run_time: the filter now (None: open)

    def _filters_pids(self) -> int:
        """filter_by_pid of its programs (and of the exec program beside them, on the same map)."""
        return int(bool(self.config.pids) or self.config.pids_at_run_time)

    def spec(self) -> ebpf.CollectionSpec:
        spec = ebpf.load_spec(object_path(self.object_name), map_prefix=self.map_prefix)
        spec.set_constant("filter_by_pid", self._filters_pids())
        spec.set_constant("self_tgid", unwalked_pid(self.config))
        announcement_offsets(spec)
        if self.config.pids_at_run_time:
            spec.maps["filter_pids"].max_entries = RUN_TIME_PIDS_MAX + 1   # and key 0
        return spec

    def load(self, spec: ebpf.CollectionSpec) -> ebpf.Collection:
        """Load the collection and fill the kernel-side filter; on failure nothing stays open."""
        # Interpreter walkers and the hooked step program load when their frame source first lists a
        # process (RuntimeMaps).
        self.collection = ebpf.Collection.load(spec, attach_trace_context(spec, self.config.obi),
                                               defer=deferred_programs(spec.programs))
        try:
            for pid in self.config.pids:
                self.collection.maps["filter_pids"].update(_PID.pack(pid), b"\x01")
            if self.config.pids_at_run_time:
                wanted, self._kernel_pids = self._kernel_pids, None
                self.collection.maps["filter_pids"].update(_EVERY_PID, b"\x01")
                self.set_kernel_pids(wanted)
            self.buffers = StackBuffers(self.collection)
            wakeups = self.collection.maps["wakeups"]
            self._wakeups = RingBuffer(wakeups.fd, wakeups.spec.max_entries)
            self._announce_execs()
        except BaseException:
            self.close()
            raise
        return self.collection

    def load_and_start(self, spec: ebpf.CollectionSpec, step_program: str, then) -> ebpf.Collection:
        """Load, start the kernel unwinder's step program (native_start) and run `then()` (links
        attached, maps filled); a failure of any of them closes what was loaded."""
        collection = self.load(spec)
        try:
            self.native_start(step_program)
            then()
        except BaseException:
            self.close()
            raise
        return collection

    # -- user stacks unwound in the kernel (unwind mode "kernel") -----------------------------------
    def native_spec(self, spec: ebpf.CollectionSpec, *step_programs: str) -> None:
        """Before loading: the unwinder's offsets and sizes in "kernel" mode (and the frame-pointer
        stack maps it replaces shrunk); otherwise its maps shrunk and its step program not loaded
        (verifying it costs ~0.25 s)."""
        if self.config.unwind == "kernel":
            self.native_vma_walk = kernel_config.configure(spec)
            spec.set_constant("unwind_in_kernel", 1)
            for name in ("user_stacks_0", "user_stacks_1"):
                spec.maps[name].max_entries = 1
        else:
            for name in _NATIVE_MAPS:
                spec.maps[name].max_entries = 1
            for name in step_programs:
                spec.programs.pop(name, None)
                spec.programs.pop(name + DEEP_SUFFIX, None)

    def native_start(self, step_program: str) -> None:
        """After loading: the step program in its tail-call slot, user stack ids read from
        native_stacks_<b>, and the named processes' tables loaded before the first sample (any
        other file's when the kernel first meets it: serve_native)."""
        if self.config.unwind != "kernel":
            return
        collection = self.collection
        self.steps = StepPrograms(collection, step_program, self.native_vma_walk)
        self.steps.start()
        self.buffers.user_stacks = "native_stacks"
        self.buffers.parse_user = parse_native_stack
        self.native = NativeTables(collection.maps)
        self.native.preload_vdso()      # (tiny, and in every process: there before the first sample)
        if self.native_vma_walk and not kernel_config.has_mm_lock_seq():
            self._count_mappings()
        for pid in self.config.pids:
            self.native.preload_process(pid)
            if not self.native_vma_walk:
                self.native.write_process(pid)

    def preload_native_shared(self) -> None:
        """The tables of the files nearly every process maps (the loader, the C library), loaded as
        sampling begins rather than when the kernel first meets them (NativeTables.preload_shared)."""
        if self.native is not None:
            self.native.preload_shared()

    def serve_native(self) -> bool:
        """Build the tables of files the kernel unwinder met without one (and, where userspace
        keeps the mapping lists, write those the program found stale). True while files wait."""
        if self.native is None:
            return False
        if self.steps is not None and self.steps.may_deepen:
            self.steps.deepen_if_cut(self.native.kernel_counters()["shallow_cut"])
        waiting = self.native.serve_missing()
        if not self.native_vma_walk:
            self.native.serve_remaps()
        return waiting

    def native_work_announced(self) -> bool:
        """Whether the program announced work for serve_native (a file without a table, a stale
        mapping list) since the last call: its record in the ring, read by clear_wakeups, no syscall.
        Where there is no ring, native_queued()."""
        if self._wakeups is None:
            return self.native_queued()
        with self._announce_lock:
            due, self._work_due = self._work_due, False
        return due and self.native is not None

    def native_queued(self) -> bool:
        """Whether serve_native has work now (the kernel queued a file or a stale mapping list)."""
        try:
            return self.native is not None and self.native.queued(remaps=not self.native_vma_walk)
        except ebpf.EbpfError:      # closing under us
            return False

    def native_remapped(self) -> list[tuple[int, int, int]]:
        """(pid, start, end): processes whose mappings changed in [start, end), under addresses the
        kernel unwinder had met (another library where one was), where the program walks the VMA
        tree itself and so can tell."""
        if self.native is None or not self.native_vma_walk:
            return []
        # queued with a wake-up: looked at only after one (a syscall at every pid-watcher round
        # otherwise, for what nearly never happens)
        if self._wakeups is not None:
            with self._announce_lock:
                due, self._remap_due = self._remap_due, False
            if not due and not self._wakeups.pending():
                return []
        try:
            return self.native.take_remapped()
        except ebpf.EbpfError:      # closing under us
            return []

    def native_process(self, pid: int, info=None) -> None:
        """A new process (`info`: its procs.ProcessInfo, maps read): where its files can be opened
        after it exits; kernels whose VMA tree the program cannot walk get its mappings from here."""
        if self.native is None:
            return
        if info is not None:
            self.native.learn_paths(info.mappings.mappings, info.root, info.root_is_host)
        if not self.native_vma_walk:
            self.native.write_process(pid)

    def _announce_execs(self) -> None:
        """Load bpf/exec.bpf.c beside the program, on its pid maps: execs and exits are announced.
        Where the kernel has no BTF for the tracepoints, execs show only through a changed comm, and
        exits through /proc (gone_pids() answers None)."""
        def prepare(spec: ebpf.CollectionSpec) -> None:
            spec.set_constant("filter_by_pid", self._filters_pids())
            announcement_offsets(spec)     # (a runtime's exec is announced with its facts)
            spec.programs[EXEC_PROGRAM].attach_btf_id = ebpf_links.btf_target_id("tp_btf", "sched_process_exec")
            spec.programs[EXIT_PROGRAM].attach_btf_id = ebpf_links.btf_target_id("tp_btf", "sched_process_exit")
        try:
            self._exec = self._load_beside("exec", "x", EXEC_SHARED_MAPS, prepare)
            self._links.append(ebpf_links.attach_tracing(self._exec.programs[EXEC_PROGRAM]))
            self._links.append(ebpf_links.attach_tracing(self._exec.programs[EXIT_PROGRAM]))
            self._exits_known = True
        except (OSError, KeyError, ebpf.EbpfError) as e:
            log.info("exec and exit detection through /proc: %s", e)

    def _count_mappings(self) -> None:
        """Load bpf/mappings.bpf.c beside the program, on its nu_procs map (kernels whose VMA tree
        the unwinder walks, without mm_lock_seq: 6.1-6.3): a library swapped for another of the
        same page counts at its address is then told, as on later kernels. Where it cannot load
        (no BTF for the tracepoint) such a swap goes unseen: the first library's name and rules
        for the second's code."""
        try:
            self._mapped = self._load_beside("mappings", "m", ("nu_procs",), kernel_config.configure_mapped)
            self._links.append(ebpf_links.attach_tracing(self._mapped.programs[kernel_config.MAPPED_PROGRAM]))
        except (OSError, KeyError, ebpf.EbpfError) as e:
            log.info("a library swapped for another of the same page counts goes unseen here: %s", e)

    def _load_beside(self, name: str, map_suffix: str, shared_names, prepare) -> ebpf.Collection:
        """bpf/<name>.bpf.c loaded on this program's maps `shared_names` (descriptors duplicated,
        which the collection owns; closed here if it does not load), its spec `prepare`d first
        (constants, attach targets). Raises what the load or `prepare` raised."""
        shared = {n: ebpf.Map(self.collection.maps[n].spec, os.dup(self.collection.maps[n].fd)) for n in shared_names}
        try:
            spec = ebpf.load_spec(object_path(name), map_prefix=self.map_prefix + map_suffix)
            prepare(spec)
            return ebpf.Collection.load(spec, shared)
        except BaseException:
            for m in shared.values():
                m.close()
            raise

    def gone_pids(self) -> dict[int, float] | None:
        """The processes this program announced that exited since the last call: pid -> time of the
        exit (time.monotonic()'s clock). None where exits are not seen (no exit program, or the queue
        overflowed and some were lost): then only /proc can tell who is gone."""
        if self.collection is None:
            return None
        gone_map = self.collection.maps["gone_pids"]
        try:
            drained = gone_map.drain()
        except ebpf.EbpfError:      # closing under us
            return None
        if not self._exits_known or len(drained) >= gone_map.spec.max_entries:
            return None
        return {_PID.unpack_from(key)[0]: _U64.unpack_from(value)[0] / 1e9 for key, value in drained}

    def set_kernel_pids(self, pids) -> None:
        """With pids_at_run_time: sample only `pids` from now on (None, or more than
        RUN_TIME_PIDS_MAX: every pid). Before load, remembered for it. The filter never closes
        before the pids it lets in are written, so no wanted sample is lost while it changes."""
        if not self.config.pids_at_run_time:
            return
        pids = frozenset(pids) if pids is not None and len(pids) <= RUN_TIME_PIDS_MAX else None
        if self.collection is None:
            self._kernel_pids = pids
            return
        if pids == self._kernel_pids:
            return
        filter_pids = self.collection.maps["filter_pids"]
        before = self._kernel_pids
        if pids is None:
            filter_pids.update(_EVERY_PID, b"\x01")
        else:
            for pid in pids - (before or frozenset()):
                if pid > 0:
                    filter_pids.update(_PID.pack(pid), b"\x01")
            if before is None:
                filter_pids.delete(_EVERY_PID)
        for pid in (before or frozenset()) - (pids or frozenset()):
            filter_pids.delete(_PID.pack(pid))
        self._kernel_pids = pids

    def start(self) -> None:   # pragma: no cover - each sampler loads and attaches its own way
        raise NotImplementedError

    def new_pids(self) -> list[tuple[int, bool, procs.Announced | None]]:
        """(pid, exec'ed, what its record told) of processes the program saw for the first time,
        with a new comm, or after an exec (a new image under the same pid), since the last call.
        They are those the ring's records announced (clear_wakeups read them), and those in the new_pids map
        where the ring was found full (or every NEW_PIDS_DRAIN_S, for a record the kernel could
        not write; they tell nothing)."""
        if self.collection is None:
            return []
        # (records the pid watcher has not read yet: a collect names its samples after this)
        self.clear_wakeups()
        now = time.monotonic()
        with self._announce_lock:
            announced, self._ring_pids = self._ring_pids, {}
            drain = self._wakeups is None or self._announced or now - self._drained_at >= NEW_PIDS_DRAIN_S
            self._announced = False
        if drain:
            self._drained_at = now
            for key, value in self.collection.maps["new_pids"].drain():
                note_announced(announced, _PID.unpack_from(key)[0], value[0])
        return [(pid, exec_ed, told) for pid, (exec_ed, told) in announced.items()]

    def collect(self) -> RawBatch:
        """Everything counted since the previous collect (a delta)."""
        assert self.buffers is not None, "start() first"
        with self.buffers.lock:
            drained = self.buffers.flip()
            return self.drain(drained)

    def drain(self, buffer: int) -> RawBatch:
        stacks, reader = self.buffers.read(buffer)
        start, end = self.buffers.interval()
        stats = self.buffers.read_stats()
        if self.native is not None:
            self.native.add_stats(stats)
        reader.clear(keep=self.still_referenced(buffer))
        if not self.config.kernel_stacks:
            stacks = without_kernel_stacks(stacks)
        return RawBatch(stacks, start, end, stats)

    def still_referenced(self, buffer: int) -> list[tuple[int, int]]:
        """(user, kernel) stack ids of the drained buffer that events in flight will count later."""
        return []

    def program_stats(self, name: str) -> int:
        """Run time (ns) of one of its programs, 0 if the kernel does not count it."""
        if self.collection is None:
            return 0
        return self.collection.programs[name].stats().run_time_ns

    def stop(self) -> None:
        """Stop sampling (detach every link); what was counted stays readable."""
        self._detach()

    def _detach(self) -> None:
        """Close every link (probes, tracepoints, the exec and exit programs': each stays attached
        host-wide while its descriptor is open)."""
        links, self._links = self._links, []
        self._exits_known = False
        for link in links:
            link.close()

    def wakeup_fd(self) -> int | None:
        """A descriptor that polls readable when the program queued work for userspace (a new pid,
        a file without unwind table, a stale mapping list): bpf/pids.h wake_userspace."""
        return self.collection.maps["wakeups"].fd if self.collection is not None and self._wakeups else None

    def mark_runtime_comm(self, comm: str) -> None:
        """A process named `comm` ran a runtime: one that execs into that name is announced at its
        exec (bpf/pids.h announce_exec), not at its first sample."""
        if self.collection is None:
            return
        key = comm.encode("utf-8", "surrogateescape")[:15].ljust(16, b"\0")
        try:
            self.collection.maps["runtime_comms"].update(key, b"\x01")
        except (ebpf.EbpfError, OSError, ValueError):     # full, or closing under us
            pass

    def mark_plain(self, image: tuple[int, str, int], plain: bool) -> None:
        """Whether the program announces processes of `image` (executable inode, comm, mount
        namespace: sampling/plain_images.py) without waking the pid watcher."""
        if self.collection is None:
            return
        exe_ino, comm, mntns = image
        key = schema.PLAIN_IMAGE.pack(exe_ino=exe_ino, mntns=mntns,
                                      comm=comm.encode(errors="replace")[:schema.COMM_LEN - 1])
        try:
            if plain:
                self.collection.maps["plain_images"].update(key, b"\x01")
            else:
                self.collection.maps["plain_images"].delete(key)
        except ebpf.EbpfError:     # full (the announcements wake as before), or closing under us
            pass

    def clear_wakeups(self) -> list[procs.Announced | None]:
        """Read the ring (it polls readable again only once read): the pids it announces, kept for
        new_pids, and whether work was queued. A ring found half full or more may have refused
        records: then the new_pids map is drained and the queues looked at, as after a record.
        Returns what the records read now told of their processes."""
        ring = self._wakeups     # (closed under us: its read raises ValueError, which callers expect)
        if ring is None:
            return []
        unpack = _ANNOUNCEMENT.unpack_from
        told_now = []
        with self._announce_lock:     # (the pid watcher's thread and a collect's read it)
            records = ring.read()
            if not records:
                return []
            full = 2 * ring.backlog >= ring.size
            pids = self._ring_pids
            for record in records:
                pid, kind, start_ns, ppid, mntns, comm, exe_ino = unpack(record)
                if pid:
                    told = procs.announced(start_ns, comm, ppid, mntns, exe_ino)
                    told_now.append(told)
                    note_announced(pids, pid, kind, told)
                else:
                    self._remap_due = self._work_due = True
            if full:
                self._announced = self._remap_due = self._work_due = True
        return told_now

    def close(self) -> None:
        """Release everything it holds: links, rings, collections (programs and maps), tables. A
        subclass's stop() may keep links (it only pauses its events): they are closed here all the same."""
        self.stop()
        self._detach()
        if self._wakeups is not None:
            self._wakeups.close()
            self._wakeups = None
        for side in (self._exec, self._mapped):
            if side is not None:
                side.close()
        self._exec = self._mapped = None
        if self.collection is not None:
            self.collection.close()
            self.collection = None
        self.buffers = None
        if self.native is not None:
            self.native.close()
        self.native = None

