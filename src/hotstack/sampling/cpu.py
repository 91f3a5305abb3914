"""The CPU sampler: bpf/profile.bpf.c on a cpu-clock perf event per CPU.

User stacks are unwound in the kernel with .eh_frame tables (--unwind kernel, the default) or
walked with frame pointers (--unwind fp); either way samples are counted in the kernel.
"""

from __future__ import annotations

from .. import ebpf
from ..bpf import schema
from .config import EngineConfig
from .runtime_maps import runtime_programs
from .sampler import Sampler

PROGRAM = "profile_cpu"
NATIVE_STEP = "profile_native_step"
# The step programs with a runtime's hooks (schema.yaml's `step` role: V8, HotSpot), put in place of
# NATIVE_STEP when the runtime's first process is found (runtime_maps.py)
RUNTIME_STEPS = tuple(sorted(runtime_programs("step")))


class CpuSampler(Sampler):
    object_name = "profile"
    map_prefix = "hotstack"
    strips_bpf_frames = False    # a perf event's kernel stack is the interrupted context's

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.frequency_hz = config.frequency
        self._events: list[ebpf.PerfEvent] = []
        self._stats_fd = -1

    def start(self) -> ebpf.Collection:
        """Load; sampling begins with attach()."""
        c = self.config
        spec = self.spec()
        spec.set_constant("filter_by_comm", int(bool(c.comms)))
        spec.set_constant("include_idle", int(c.include_idle))
        spec.set_constant("collect_user_stacks", int(c.user_stacks))
        spec.set_constant("collect_kernel_stacks", int(c.kernel_stacks))
        self.native_spec(spec, NATIVE_STEP, *RUNTIME_STEPS)
        return self.load_and_start(spec, NATIVE_STEP, self._prepare)

    def _prepare(self) -> None:
        """After loading: the command names filtered, run-time stats on, the first interval begun."""
        for comm in self.config.comms:
            self.collection.maps["filter_comms"].update(
                comm.encode()[:schema.COMM_LEN - 1].ljust(schema.COMM_LEN, b"\0"), b"\x01")
        try:
            self._stats_fd = ebpf.enable_run_time_stats()
        except ebpf.SyscallError:
            self._stats_fd = -1   # run-time stats are a nicety; sampling works without them
        self.buffers.interval()   # the first interval starts now

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
        return sum(self.program_stats(name) for name in self.collection.programs)

    def stop(self) -> None:
        """The perf events disabled (kept open until close) and the links detached."""
        for event in self._events:
            try:
                event.disable()
            except ebpf.SyscallError:
                pass
        super().stop()

    def close(self) -> None:
        for event in self._events:
            event.close()
        self._events = []
        super().close()
        if self._stats_fd >= 0:
            ebpf.syscalls.close(self._stats_fd)
            self._stats_fd = -1
