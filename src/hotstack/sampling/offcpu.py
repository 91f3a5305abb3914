"""Off-CPU sessions: where threads wait, weighted by how long they were off the CPU.

`OffCpuConfig(threshold=...)` is pyroscope.ebpf's `off_cpu_threshold`: the chance
(0..1] that a switch-out is recorded (1 = every one). Values are the nanoseconds
the recorded switch-outs lasted, not scaled by the threshold, as pyroscope.ebpf
reports them. The profile is `offcpu:offcpu:nanoseconds::` (no period type).

Stacks are captured when a thread leaves the CPU, in the buffer active then; its
time is added when it comes back, in that same buffer. So when a buffer is
drained, the stacks of threads still off the CPU are kept for their later count.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .. import ebpf
from ..bpf import object_path as bpf_object_path
from ..ebpf import links as ebpf_links
from ..errors import ConfigError, HotstackError
from ..profile.model import ValueType
from .event_profiler import EventProfiler
from .obi import ObiConfig, attach_trace_context
from .stack_buffers import EventBatch, LinkedEventSession, StackBuffers

OFFCPU_PROFILE_NAME = "offcpu"
OFFCPU_SAMPLE_TYPE = ValueType("offcpu", "nanoseconds")
NO_PERIOD = ValueType("", "")

# struct off_cpu in offcpu.bpf.c: since, user_stack_id, kern_stack_id, pid, buffer, comm (then the OBI span)
OFF_CPU_ENTRY = struct.Struct("<QiiII16s")


@dataclass(frozen=True)
class OffCpuConfig:
    threshold: float = 1.0
    pids: tuple[int, ...] = ()
    obi: ObiConfig | None = None      # trace/span labels from OBI's pinned map; None: off

    def validate(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ConfigError(f"off-CPU threshold {self.threshold}: must be in (0, 1] (0 turns off-CPU profiling off)")

    @property
    def threshold_u32(self) -> int:
        """bpf_get_prandom_u32() <= this records the event."""
        return min(0xFFFFFFFF, int(self.threshold * 0xFFFFFFFF))


def object_path() -> str:
    return bpf_object_path("offcpu")


class OffCpuSession(LinkedEventSession):
    profile_name = OFFCPU_PROFILE_NAME
    sample_type = OFFCPU_SAMPLE_TYPE
    period_type = NO_PERIOD

    def __init__(self, config: OffCpuConfig) -> None:
        config.validate()
        super().__init__(config)

    def start(self) -> None:
        spec = ebpf.load_spec(object_path(), map_prefix="hsoffcpu")
        try:
            btf = ebpf.kernel_btf()
            ebpf_links.resolve_btf_targets(spec, btf)
            spec.set_constant("task_pid_offset", btf.member_offset("task_struct", "pid"))
        except (OSError, ebpf_links.MissingKernelFeature, KeyError) as e:
            raise HotstackError(f"off-CPU profiling needs the sched_switch BTF tracepoint and the kernel's BTF "
                                f"(CONFIG_DEBUG_INFO_BTF): {e}") from None
        spec.set_constant("threshold", self.config.threshold_u32)
        spec.set_constant("filter_by_pid", int(bool(self.config.pids)))
        self._collection = ebpf.Collection.load(spec, attach_trace_context(spec, self.config.obi))
        try:
            for pid in self.config.pids:
                self._collection.maps["filter_pids"].update(struct.pack("<I", pid), b"\x01")
            self._buffers = StackBuffers(self._collection)
            self._links.append(ebpf_links.attach_tracing(self._collection.programs["offcpu_sched_switch"]))
        except BaseException:
            self.close()
            raise

    def _still_off_cpu(self, buffer: int) -> list[tuple[int, int]]:
        """Stack ids, in `buffer`, of threads that left the CPU and have not come back yet."""
        kept = []
        for _tid, raw in self._collection.maps["off_cpu_threads"].items():
            _since, ustack, kstack, _pid, entry_buffer, _comm = OFF_CPU_ENTRY.unpack_from(raw)
            if entry_buffer == buffer:
                kept.append((ustack, kstack))
        return kept

    def collect(self) -> EventBatch:
        assert self._buffers is not None, "start() first"
        return self._buffers.collect(keep_stacks=self._still_off_cpu)


class OffCpuProfiler(EventProfiler):
    """Off-CPU time -> Profiles (`offcpu`, sample type offcpu/nanoseconds)."""

    def __init__(self, config: OffCpuConfig, **kw) -> None:
        super().__init__(OffCpuSession(config), **kw)
