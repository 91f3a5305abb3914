"""The sampling session: configures the BPF sampler, drains it every interval.

It yields raw samples (pid, tid, comm, stack addresses, count): no symbols, no
exporters. Draining uses two buffers in the kernel: the session flips the
program to the other buffer, waits for programs still running on the old one,
then reads and clears it, so every sample is read exactly once.

Processes without frame pointers send user-stack snapshots instead (see
bpf/profile.bpf.c): `poll_snapshots` moves them from the ring buffer into a
pending list often (the ring is small); `collect` hands over the snapshots whose
buffer it drains, with their kernel stacks resolved, and keeps the others for
the next interval. Unwinding them is the caller's job (hotstack.unwind).
"""

from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass, field

from .. import ebpf
from ..bpf import object_path as bpf_object_path
from ..profile.model import ProfileStats
from . import layout
from .obi import ObiConfig, attach_trace_context
from .ringbuf import RingBuffer

# Perf-event BPF programs run with preemption off and take microseconds; after a
# flip, this is ample time for any program that read the old buffer index to finish.
_FLIP_GRACE_S = 0.005


@dataclass(frozen=True)
class SamplerConfig:
    frequency: int = 49
    pids: tuple[int, ...] = ()
    comms: tuple[str, ...] = ()
    include_idle: bool = False
    user_stacks: bool = True
    kernel_stacks: bool = True
    # "fp": frame pointers only; "dwarf": user-stack snapshots for every process;
    # "auto": snapshots for the pids passed to mark_snapshot_pid (the profiler marks
    # processes that map code without frame pointers).
    unwind: str = "auto"
    snapshot_ring_bytes: int = 8 << 20
    # Replace the interpreter's evaluation frames by the Python frames they run (unwind/python).
    python_enabled: bool = True
    # OBI trace/span correlation (sampling/obi.py): samples carry trace_id/span_id; None: off.
    obi: "ObiConfig | None" = None

UNWIND_MODES = {"fp": layout.SNAPSHOT_NONE, "auto": layout.SNAPSHOT_LISTED, "dwarf": layout.SNAPSHOT_ALL}


@dataclass(frozen=True, slots=True)
class RawSample:
    pid: int
    tid: int
    comm: str
    user_stack: tuple[int, ...]       # leaf first; empty if not collected or lost
    kernel_stack: tuple[int, ...]     # leaf first
    count: int
    user_stack_lost: bool = False
    kernel_stack_lost: bool = False
    python_stack: int = 0             # key of its Python frames (unwind/python/unwinder.py), 0: none
    trace: bytes = b""                # OBI trace id (16 bytes) + span id (8) of the thread; zero: none


@dataclass(frozen=True, slots=True)
class StackSnapshot:
    """One sample whose user stack is still to be unwound: registers and a copy of the stack."""

    pid: int
    tid: int
    comm: str
    ip: int
    sp: int
    bp: int
    stack: bytes                      # the user stack from sp upwards (b"" once unwound)
    kernel_stack: tuple[int, ...]
    kernel_stack_lost: bool = False
    unwound: tuple[int, ...] | None = None   # the user stack, if `early_unwind` already walked it
    python_stack: int = 0             # as RawSample.python_stack: carry it to the RawSample
    trace: bytes = b""                # as RawSample.trace


@dataclass
class SnapshotStats:
    sent: int = 0                     # samples sent as snapshots
    ring_full: int = 0                # not sent (ring full): counted with frame pointers instead
    no_regs: int = 0                  # not sent (no user registers): counted with frame pointers


@dataclass
class RawBatch:
    samples: list[RawSample]
    start_ns: int
    end_ns: int
    stats: ProfileStats = field(default_factory=ProfileStats)
    snapshots: list[StackSnapshot] = field(default_factory=list)
    snapshot_stats: SnapshotStats = field(default_factory=SnapshotStats)


def object_path() -> str:
    return bpf_object_path("profile")


class SamplingSession:
    """Owns the loaded sampler and its perf events. Use as a context manager."""

    def __init__(self, config: SamplerConfig) -> None:
        self.config = config
        self._collection: ebpf.Collection | None = None
        self._events: list[ebpf.PerfEvent] = []
        self._active = 0
        self._last_ns = 0
        self._stats_fd = -1
        self._lock = threading.Lock()
        self._stat_totals = [0] * layout.STAT_MAX
        self._ring: RingBuffer | None = None
        self._pending: list[tuple] = []     # parsed snapshot records not yet handed over
        self._ring_lock = threading.Lock()
        self.snapshot_bytes_read = 0
        # (pid, ip, sp, bp, stack) -> user stack. Set by the owner of the session, it walks each
        # snapshot as it leaves the ring, so that only addresses wait for the end of the interval
        # (18 KB per sample would add up to hundreds of MB over a long interval).
        self.early_unwind = None

    def start(self, snapshot_pids: tuple[int, ...] = ()) -> None:
        """Load and attach; `snapshot_pids` are marked for snapshots before the first sample."""
        spec = ebpf.load_spec(object_path(), map_prefix="hotstack")
        c = self.config
        spec.set_constant("filter_by_pid", int(bool(c.pids)))
        spec.set_constant("filter_by_comm", int(bool(c.comms)))
        spec.set_constant("include_idle", int(c.include_idle))
        spec.set_constant("collect_user_stacks", int(c.user_stacks))
        spec.set_constant("collect_kernel_stacks", int(c.kernel_stacks))
        if c.unwind not in UNWIND_MODES:
            raise ValueError(f"unwind mode {c.unwind!r}: expected one of {', '.join(UNWIND_MODES)}")
        spec.set_constant("snapshot_mode", UNWIND_MODES[c.unwind])
        spec.maps["snapshots"].max_entries = c.snapshot_ring_bytes
        self._collection = ebpf.Collection.load(spec, attach_trace_context(spec, c.obi))
        try:
            self._ring = RingBuffer(self._collection.maps["snapshots"].fd, c.snapshot_ring_bytes)
            for pid in c.pids:
                self._collection.maps["filter_pids"].update(struct.pack("<I", pid), b"\x01")
            for comm in c.comms:
                self._collection.maps["filter_comms"].update(comm.encode()[:15].ljust(16, b"\0"), b"\x01")
            for pid in snapshot_pids:
                self.mark_snapshot_pid(pid)
            try:
                self._stats_fd = ebpf.enable_run_time_stats()
            except ebpf.SyscallError:
                self._stats_fd = -1   # run-time stats are a nicety; sampling works without them
            self._last_ns = time.time_ns()
            self._events = ebpf.open_cpu_clock_events(c.frequency, self._collection.programs["profile_cpu"])
        except BaseException:
            self.close()
            raise

    @property
    def program(self) -> ebpf.Program:
        assert self._collection is not None
        return self._collection.programs["profile_cpu"]

    def bpf_run_time_ns(self) -> int:
        """Total time the kernel spent in the sampler program (0 if stats are unavailable)."""
        if self._collection is None or self._stats_fd < 0:
            return 0
        return self.program.stats().run_time_ns

    def mark_snapshot_pid(self, pid: int) -> None:
        """From now on, send this process's user stacks as snapshots (unwind mode "auto")."""
        if self._collection is not None:
            self._collection.maps["snapshot_pids"].update(struct.pack("<I", pid), b"\x01")

    def forget_snapshot_pid(self, pid: int) -> None:
        if self._collection is not None:
            self._collection.maps["snapshot_pids"].delete(struct.pack("<I", pid))

    def poll_snapshots(self) -> int:
        """Move snapshot records from the kernel's ring into the pending list; call often."""
        with self._ring_lock:
            if self._ring is None:
                return 0
            records = self._ring.read()
            key_size, tail = layout.SAMPLE_KEY.size, layout.SNAPSHOT_TAIL
            for rec in records:
                pid, tid, _ustack, kstack_id, python_stack, trace = layout.SAMPLE_KEY.unpack_from(rec)
                comm, buffer, stack_len, ip, sp, bp = tail.unpack_from(rec, key_size)
                start = layout.SNAPSHOT_HEADER_SIZE
                stack = rec[start:start + min(stack_len, layout.SNAPSHOT_STACK_BYTES)]
                self.snapshot_bytes_read += len(rec)
                if self.early_unwind is not None:
                    stack = self.early_unwind(pid, ip, sp, bp, stack)     # a tuple of addresses now
                self._pending.append((buffer, pid, tid, kstack_id, comm, ip, sp, bp, stack, python_stack, trace))
            return len(records)

    def _take_pending(self, buffer: int) -> list[tuple]:
        with self._ring_lock:
            taken = [p for p in self._pending if p[0] == buffer]
            self._pending = [p for p in self._pending if p[0] != buffer]
            return taken

    def collect(self) -> RawBatch:
        """Everything sampled since the previous collect (a delta)."""
        assert self._collection is not None, "start() first"
        with self._lock:
            drained = self._active
            self._active ^= 1
            self._collection.variable("active_buffer").set(self._active)
            time.sleep(_FLIP_GRACE_S)
            self.poll_snapshots()
            now = time.time_ns()
            samples, snapshots = self._read_buffer(drained, self._take_pending(drained))
            stats, snapshot_stats = self._read_stats()
            batch = RawBatch(samples, self._last_ns, now, stats, snapshots, snapshot_stats)
            self._last_ns = now
            return batch

    def _read_buffer(self, index: int, pending: list[tuple]) -> tuple[list[RawSample], list[StackSnapshot]]:
        maps = self._collection.maps
        counts = maps[f"counts_{index}"]
        ustacks = maps[f"user_stacks_{index}"]
        kstacks = maps[f"kern_stacks_{index}"]
        entries = counts.drain()
        user_cache: dict[int, tuple[int, ...]] = {}
        kern_cache: dict[int, tuple[int, ...]] = {}

        def stack(m: ebpf.Map, cache: dict, stack_id: int) -> tuple[int, ...] | None:
            if stack_id < 0:
                return ()
            if stack_id not in cache:
                raw = m.lookup(struct.pack("<I", stack_id))
                cache[stack_id] = layout.parse_stack(raw) if raw is not None else None
            return cache[stack_id]

        samples = []
        for key, value in entries:
            pid, tid, ustack_id, kstack_id, python_stack, trace = layout.SAMPLE_KEY.unpack_from(key)
            count, comm = layout.SAMPLE_VALUE.unpack_from(value)
            ustack = stack(ustacks, user_cache, ustack_id)
            kstack = stack(kstacks, kern_cache, kstack_id)
            samples.append(RawSample(
                pid, tid, comm.split(b"\0", 1)[0].decode("utf-8", "replace"), ustack or (), kstack or (), count,
                user_stack_lost=ustack is None or ustack_id < -1, kernel_stack_lost=kstack is None or kstack_id < -1,
                python_stack=python_stack, trace=trace))
        snapshots = []
        for _buffer, pid, tid, kstack_id, comm, ip, sp, bp, stack_bytes, python_stack, trace in pending:
            kstack = stack(kstacks, kern_cache, kstack_id)
            unwound = stack_bytes if isinstance(stack_bytes, tuple) else None
            snapshots.append(StackSnapshot(
                pid, tid, comm.split(b"\0", 1)[0].decode("utf-8", "replace"), ip, sp, bp,
                b"" if unwound is not None else stack_bytes,
                kstack or (), kernel_stack_lost=kstack is None or kstack_id < -1, python_stack=python_stack,
                trace=trace, unwound=unwound))
        for m, cache in ((ustacks, user_cache), (kstacks, kern_cache)):
            for stack_id in cache:
                m.delete(struct.pack("<I", stack_id))
            # Stacks whose count could not be stored (map full) are unreferenced: clear them too.
            for leftover in list(m.keys()):
                m.delete(leftover)
        return samples, snapshots

    def _read_stats(self) -> tuple[ProfileStats, SnapshotStats]:
        stats_map = self._collection.maps["stats"]
        totals = []
        for i in range(layout.STAT_MAX):
            values = stats_map.lookup_percpu(struct.pack("<I", i))
            totals.append(sum(struct.unpack_from("<Q", v)[0] for v in values))
        delta = [t - p for t, p in zip(totals, self._stat_totals)]
        self._stat_totals = totals
        return ProfileStats(
            samples=delta[layout.STAT_SAMPLES], idle=delta[layout.STAT_IDLE],
            filtered=delta[layout.STAT_FILTERED], counts_full=delta[layout.STAT_COUNTS_FULL],
            user_stacks_lost=delta[layout.STAT_USTACK_COLLISION] + delta[layout.STAT_USTACK_ERROR],
            kernel_stacks_lost=delta[layout.STAT_KSTACK_COLLISION] + delta[layout.STAT_KSTACK_ERROR],
            stack_collisions=delta[layout.STAT_USTACK_COLLISION] + delta[layout.STAT_KSTACK_COLLISION]), \
            SnapshotStats(delta[layout.STAT_SNAPSHOTS], delta[layout.STAT_SNAPSHOT_RING_FULL],
                          delta[layout.STAT_SNAPSHOT_NO_REGS])

    def stop(self) -> None:
        for event in self._events:
            try:
                event.disable()
            except ebpf.SyscallError:
                pass

    def close(self) -> None:
        for event in self._events:
            event.close()
        self._events = []
        with self._ring_lock:
            if self._ring is not None:
                self._ring.close()
                self._ring = None
        if self._collection is not None:
            self._collection.close()
            self._collection = None
        if self._stats_fd >= 0:
            ebpf.syscalls.close(self._stats_fd)
            self._stats_fd = -1

    def __enter__(self) -> "SamplingSession":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
