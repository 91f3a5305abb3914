"""The off-CPU sampler: where threads wait, weighted by how long they were off the CPU.

EngineConfig.off_cpu_threshold is pyroscope.ebpf's `off_cpu_threshold`: the chance
(0..1] that a switch-out is recorded (1 = every one). Values are the nanoseconds
the recorded switch-outs lasted, not scaled by the threshold, as pyroscope.ebpf
reports them. The profile is `offcpu:offcpu:nanoseconds::` (no period type).

Stacks are captured when a thread leaves the CPU, in the buffer active then; its
time is added when it comes back, in that same buffer. So when a buffer is
drained, the stacks of threads still off the CPU are kept for their later count.
"""

from __future__ import annotations

from ..bpf import schema
from ..ebpf import kernel_btf, links as ebpf_links
from ..errors import HotstackError
from ..profile.model import ValueType
from .sampler import Sampler

OFFCPU_PROFILE_NAME = "offcpu"
OFFCPU_SAMPLE_TYPE = ValueType("offcpu", "nanoseconds")
NO_PERIOD = ValueType("", "")
PROGRAM = "offcpu_sched_switch"
NATIVE_STEP = "offcpu_native_step"


def threshold_u32(threshold: float) -> int:
    """bpf_get_prandom_u32() <= this records the event."""
    return min(0xFFFFFFFF, int(threshold * 0xFFFFFFFF))


class OffCpuSampler(Sampler):
    object_name = "offcpu"
    map_prefix = "hsoffcpu"
    profile_name = OFFCPU_PROFILE_NAME
    sample_type = OFFCPU_SAMPLE_TYPE
    period_type = NO_PERIOD

    def start(self) -> None:
        spec = self.spec()
        self.native_spec(spec, NATIVE_STEP)
        try:
            btf = kernel_btf()
            ebpf_links.resolve_btf_targets(spec, btf)
            spec.set_constant("task_pid_offset", btf.member_offset("task_struct", "pid"))
        except (OSError, ebpf_links.MissingKernelFeature, KeyError) as e:
            raise HotstackError(f"off-CPU profiling needs the sched_switch BTF tracepoint and the kernel's BTF "
                                f"(CONFIG_DEBUG_INFO_BTF): {e}") from None
        spec.set_constant("threshold", threshold_u32(self.config.off_cpu_threshold))
        self.load_and_start(spec, NATIVE_STEP,
                            lambda: self._links.append(ebpf_links.attach_tracing(self.collection.programs[PROGRAM])))

    def still_referenced(self, buffer: int) -> list[tuple[int, int]]:
        """Stack ids, in `buffer`, of threads that left the CPU and have not come back yet."""
        kept = []
        for _tid, raw in self.collection.maps["off_cpu_threads"].items():
            entry = schema.OFF_CPU.unpack(raw)
            if entry.buffer == buffer:
                kept.append((entry.user_stack_id, entry.kern_stack_id))
        return kept
