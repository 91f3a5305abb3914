"""RawStack -> Sample: symbols, runtime frames and labels, in one place for every sampler."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, is_

from ..procs import ProcessTable
from ..profile.model import LOST_KERNEL, LOST_USER, TRUNCATED, Frame, FrameKind, Sample
from ..symbols.symbolizer import Symbolizer
from ..unwind.runtimes import FrameSource
from .buffers import RawStack
from .obi import trace_labels

# The leaf frames of a stack taken inside a BPF program are the program and its dispatcher.
_BPF_FRAME_PREFIXES = ("bpf_prog_", "bpf_trace_run", "__bpf_trace_", "bpf_trampoline_")

# Frames whose name cannot change while their process runs: a file's symbol (or file+0xOFF), a
# kernel symbol, a Python code object's (CPython's cache checks the object it names), a marker.
# Not a JIT frame (its code moves), another runtime's, or one not named yet ("[unknown]",
# "[unknown python]": the maps or the code object may be read again). Kinds are compared by
# identity: an Enum member's hash is a Python-level call, ~40% of the check.
_SETTLED_KINDS = frozenset(map(id, (FrameKind.NATIVE, FrameKind.KERNEL, FrameKind.PYTHON)))
_MARKERS = (TRUNCATED, LOST_USER, LOST_KERNEL)
_KIND = attrgetter("kind")
_RESOLVED = attrgetter("resolved")


def without_bpf_frames(frames: list[Frame]) -> list[Frame]:
    skip = 0
    while skip < len(frames) - 1 and frames[skip].name.startswith(_BPF_FRAME_PREFIXES):
        skip += 1
    return frames[skip:]


def settled(stack: Sequence[Frame]) -> bool:
    """Whether every frame of a named stack would be named the same in a later interval."""
    if not set(map(id, map(_KIND, stack))) <= _SETTLED_KINDS:
        return False
    if all(map(_RESOLVED, stack)):
        return True
    return not any(f.name.startswith("[") and not any(f is m for m in _MARKERS)
                   for f in stack if not f.resolved)


class SampleMaker:
    """Names RawStacks. A stack that recurs from one interval to the next (a steady program's
    stacks do) is named once: what a stack was named as in this or the last interval is taken again
    when it comes from the same process (the process table's entry, which an exec or a reused pid
    replaces) and every frame of it is settled. Stacks not met for a whole interval are let go."""

    def __init__(self, symbolizer: Symbolizer, processes: ProcessTable, runtimes: Sequence[FrameSource]) -> None:
        self.symbolizer = symbolizer
        self.processes = processes
        self.runtimes = list(runtimes)
        # raw stack -> (process entry, named stack, truncated): this interval's and the last one's
        self._named: dict[tuple, tuple] = {}
        self._named_before: dict[tuple, tuple] = {}
        self.renamed = 0        # stacks named from an earlier interval's naming (tests, metrics)

    def next_interval(self) -> None:
        """Call after each collect: stacks not met in it are forgotten after the next one."""
        self._named_before, self._named = self._named, {}

    def sample(self, raw: RawStack, strip_bpf: bool) -> tuple[Sample, bool]:
        """(the sample, whether a runtime stack in it was truncated)."""
        info = self.processes.get(raw.pid) if raw.pid else None
        key = (raw.pid, raw.user_stack, raw.kernel_stack, raw.runtime_stack, raw.user_stack_lost,
               raw.kernel_stack_lost, strip_bpf)
        named = self._named.get(key)
        if named is None:
            named = self._named_before.get(key)
            if named is not None:
                self._named[key] = named
        if named is not None and named[0] is info:
            self.renamed += 1
            _, stack, truncated = named
        else:
            stack, truncated, merged = self._name(raw, strip_bpf)
            # a runtime stack not merged yet (its record not at hand) may be merged later
            if (merged or not raw.runtime_stack) and settled(stack):
                self._named[key] = (info, stack, truncated)
        labels = (("container_id", info.container_id),) if info is not None and info.container_id else ()
        labels += trace_labels(raw.trace_id, raw.span_id)
        return Sample(stack, raw.value, raw.pid, raw.tid, raw.comm, labels), truncated

    def _name(self, raw: RawStack, strip_bpf: bool) -> tuple[tuple[Frame, ...], bool, bool]:
        """(the named stack, truncated, whether a runtime source merged frames into it)."""
        stack: list[Frame] = []
        if raw.kernel_stack:
            kernel = self.symbolizer.kernel_frames(list(raw.kernel_stack))
            stack.extend(without_bpf_frames(kernel) if strip_bpf else kernel)
        elif raw.kernel_stack_lost:
            stack.append(LOST_KERNEL)
        user = self.symbolizer.user_frames(raw.pid, list(raw.user_stack)) if raw.user_stack else []
        truncated = merged = False
        if raw.runtime_stack:
            for source in self.runtimes:
                with_runtime = source.merge(raw.pid, raw.runtime_stack, user)
                if with_runtime is not user:
                    user = with_runtime
                    merged = True
                    # (identity, in one C-level pass: `in` would compare frames field by field)
                    truncated = any(map(is_, user, repeat(TRUNCATED)))
                    break
        if user:
            stack.extend(user)
        elif raw.user_stack_lost:
            stack.append(LOST_USER)
        return tuple(stack), truncated, merged
