"""RawStack -> Sample: symbols, runtime frames and labels, in one place for every sampler."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import is_

from ..procs import ProcessTable
from ..profile.model import LOST_KERNEL, LOST_USER, TRUNCATED, Frame, Sample
from ..symbols.symbolizer import Symbolizer
from ..unwind.runtimes import FrameSource
from .buffers import RawStack
from .obi import trace_labels

# The leaf frames of a stack taken inside a BPF program are the program and its dispatcher.
_BPF_FRAME_PREFIXES = ("bpf_prog_", "bpf_trace_run", "__bpf_trace_", "bpf_trampoline_")


def without_bpf_frames(frames: list[Frame]) -> list[Frame]:
    skip = 0
    while skip < len(frames) - 1 and frames[skip].name.startswith(_BPF_FRAME_PREFIXES):
        skip += 1
    return frames[skip:]


class SampleMaker:
    def __init__(self, symbolizer: Symbolizer, processes: ProcessTable, runtimes: Sequence[FrameSource]) -> None:
        self.symbolizer = symbolizer
        self.processes = processes
        self.runtimes = list(runtimes)

    def sample(self, raw: RawStack, strip_bpf: bool) -> tuple[Sample, bool]:
        """(the sample, whether a runtime stack in it was truncated)."""
        stack: list[Frame] = []
        if raw.kernel_stack:
            kernel = self.symbolizer.kernel_frames(list(raw.kernel_stack))
            stack.extend(without_bpf_frames(kernel) if strip_bpf else kernel)
        elif raw.kernel_stack_lost:
            stack.append(LOST_KERNEL)
        user = self.symbolizer.user_frames(raw.pid, list(raw.user_stack)) if raw.user_stack else []
        truncated = False
        if raw.runtime_stack:
            for source in self.runtimes:
                merged = source.merge(raw.pid, raw.runtime_stack, user)
                if merged is not user:
                    user = merged
                    # (identity, in one C-level pass: `in` would compare frames field by field)
                    truncated = any(map(is_, user, repeat(TRUNCATED)))
                    break
        if user:
            stack.extend(user)
        elif raw.user_stack_lost:
            stack.append(LOST_USER)
        info = self.processes.get(raw.pid) if raw.pid else None
        labels = (("container_id", info.container_id),) if info is not None and info.container_id else ()
        labels += trace_labels(raw.trace_id, raw.span_id)
        return Sample(tuple(stack), raw.value, raw.pid, raw.tid, raw.comm, labels), truncated
