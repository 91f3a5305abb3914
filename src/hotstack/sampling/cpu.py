"""The CPU sampler: bpf/profile.bpf.c on a cpu-clock perf event per CPU.

Frame-pointer stacks are counted in the kernel; processes without frame pointers send
user-stack snapshots instead (snapshots.py), which the engine's native unwinder walks.
"""

from __future__ import annotations

import struct

from .. import ebpf
from ..bpf import schema
from .config import EngineConfig
from .sampler import Sampler
from .snapshots import Snapshots, UnwindFn

_PID = struct.Struct("<I")
SNAPSHOT_MODES = {"fp": schema.SNAPSHOT_NONE, "auto": schema.SNAPSHOT_LISTED, "dwarf": schema.SNAPSHOT_ALL,
                  "kernel": schema.SNAPSHOT_NATIVE}
PROGRAM = "profile_cpu"
NATIVE_STEP = "profile_native_step"


class CpuSampler(Sampler):
    object_name = "profile"
    map_prefix = "hotstack"
    strips_bpf_frames = False    # a perf event's kernel stack is the interrupted context's

    def __init__(self, config: EngineConfig, unwind: UnwindFn) -> None:
        super().__init__(config)
        self.frequency_hz = config.frequency
        self._unwind = unwind
        self.snapshots: Snapshots | None = None
        self._events: list[ebpf.PerfEvent] = []
        self._stats_fd = -1

    def start(self, snapshot_pids: tuple[int, ...] = ()) -> ebpf.Collection:
        """Load and attach; `snapshot_pids` are marked for snapshots before the first sample."""
        c = self.config
        spec = self.spec()
        spec.set_constant("filter_by_comm", int(bool(c.comms)))
        spec.set_constant("include_idle", int(c.include_idle))
        spec.set_constant("collect_user_stacks", int(c.user_stacks))
        spec.set_constant("collect_kernel_stacks", int(c.kernel_stacks))
        spec.set_constant("snapshot_mode", SNAPSHOT_MODES[c.unwind])
        spec.maps["snapshots"].max_entries = c.snapshot_ring_bytes
        self.native_spec(spec, NATIVE_STEP)
        if c.unwind == "kernel":     # user stacks go to native_stacks_<b>: no frame-pointer stack map
            for name in ("user_stacks_0", "user_stacks_1"):
                spec.maps[name].max_entries = 1
        collection = self.load(spec)
        try:
            self.native_start(NATIVE_STEP)
            self.snapshots = Snapshots(collection.maps["snapshots"].fd, c.snapshot_ring_bytes, self._unwind)
            for comm in c.comms:
                collection.maps["filter_comms"].update(comm.encode()[:schema.COMM_LEN - 1].ljust(schema.COMM_LEN, b"\0"),
                                                       b"\x01")
            for pid in snapshot_pids:
                self.mark_snapshot_pid(pid)
            try:
                self._stats_fd = ebpf.enable_run_time_stats()
            except ebpf.SyscallError:
                self._stats_fd = -1   # run-time stats are a nicety; sampling works without them
            self.buffers.interval()   # the first interval starts now
        except BaseException:
            self.close()
            raise
        return collection

    def attach(self) -> None:
        """Start the perf events: sampling begins."""
        try:
            self._events = ebpf.open_cpu_clock_events(self.config.frequency, self.collection.programs[PROGRAM])
        except BaseException:
            self.close()
            raise

    def bpf_run_time_ns(self) -> int:
        """Total time the kernel spent in the sampler program (0 if stats are unavailable)."""
        if self.collection is None or self._stats_fd < 0:
            return 0
        return self.program_stats(PROGRAM) + (self.program_stats(NATIVE_STEP) if self.native is not None else 0)

    @property
    def snapshot_bytes_read(self) -> int:
        return self.snapshots.bytes_read if self.snapshots is not None else 0

    def mark_snapshot_pid(self, pid: int) -> None:
        """From now on, send this process's user stacks as snapshots (unwind mode "auto")."""
        if self.collection is not None:
            self.collection.maps["snapshot_pids"].update(_PID.pack(pid), b"\x01")

    def forget_snapshot_pid(self, pid: int) -> None:
        if self.collection is not None:
            self.collection.maps["snapshot_pids"].delete(_PID.pack(pid))

    def poll_snapshots(self) -> int:
        return self.snapshots.poll() if self.snapshots is not None else 0

    def pending(self, buffer: int, reader) -> list:
        # Snapshot records still in the ring may belong to this buffer: take them too.
        self.poll_snapshots()
        return self.snapshots.take(buffer, reader)

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
        if self.snapshots is not None:
            self.snapshots.close()
            self.snapshots = None
        super().close()
        if self._stats_fd >= 0:
            ebpf.syscalls.close(self._stats_fd)
            self._stats_fd = -1
