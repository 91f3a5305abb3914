"""EventProfiler: event-driven sessions (probe hits, off-CPU time) -> Profiles.

The same shape as CpuProfiler, with the engine's one process table and one
symbolizer: a session yields EventBatches of raw stacks; this turns them into a
Profile per interval with the session's profile name and value types. A
background thread drains the kernel's `new_pids` map so that a process's maps
are read while it still runs.
"""

from __future__ import annotations

import threading
from typing import Protocol

from ..procs import ProcessTable
from ..profile.model import Frame, Profile, Sample, ValueType
from ..symbols.symbolizer import Symbolizer
from .lifecycle import IntervalProfiler
from .obi import trace_labels
from .stack_buffers import EventBatch, EventSample

_LOST_USER = Frame("[lost user stack]", resolved=False)
_LOST_KERNEL = Frame("[lost kernel stack]", resolved=False)


class EventSession(Protocol):
    profile_name: str
    sample_type: ValueType
    period_type: ValueType

    def start(self) -> None: ...
    def collect(self) -> EventBatch: ...
    def new_pids(self) -> list[int]: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


class EventProfiler(IntervalProfiler):
    def __init__(self, session: EventSession, symbolizer: Symbolizer | None = None,
                 processes: ProcessTable | None = None, watch_interval_s: float = 0.1) -> None:
        self.session = session
        if processes is None:
            processes = symbolizer.processes if symbolizer is not None else ProcessTable()
        self.processes = processes
        self.symbolizer = symbolizer if symbolizer is not None else Symbolizer(self.processes)
        self._watch_interval = watch_interval_s
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        self.session.start()
        self.symbolizer.kernel  # parse kallsyms now, not in the first interval
        self._watcher = threading.Thread(target=self._watch_new_pids, name="hotstack-event-pids", daemon=True)
        self._watcher.start()

    def _watch_new_pids(self) -> None:
        while not self._stop.wait(self._watch_interval):
            self.observe_new_pids()

    def observe_new_pids(self) -> None:
        try:
            pids = self.session.new_pids()
        except Exception:   # the session is closing under us
            return
        for pid in pids:
            self.processes.observe(pid)

    def collect(self) -> Profile:
        self.observe_new_pids()
        profile = self.to_profile(self.session.collect())
        self.processes.forget_dead()
        return profile

    def to_profile(self, batch: EventBatch) -> Profile:
        s = self.session
        # frequency_hz=0: one event stands for itself (period 1), not for 1/Hz of CPU.
        return Profile(samples=[self._sample(raw) for raw in batch.samples], start_ns=batch.start_ns,
                       duration_ns=batch.end_ns - batch.start_ns, frequency_hz=0, name=s.profile_name,
                       sample_type=s.sample_type, period_type=s.period_type, stats=batch.stats)

    def _sample(self, raw: EventSample) -> Sample:
        stack: list[Frame] = []
        if raw.kernel_stack:
            stack.extend(_without_bpf_frames(self.symbolizer.kernel_frames(list(raw.kernel_stack))))
        elif raw.kernel_stack_lost:
            stack.append(_LOST_KERNEL)
        if raw.user_stack:
            stack.extend(self.symbolizer.user_frames(raw.pid, list(raw.user_stack)))
        elif raw.user_stack_lost:
            stack.append(_LOST_USER)
        info = self.processes.get(raw.pid) if raw.pid else None
        labels = (("container_id", info.container_id),) if info is not None and info.container_id else ()
        return Sample(tuple(stack), raw.value, raw.pid, raw.tid, raw.comm,
                      labels + trace_labels(raw.trace_id, raw.span_id))


# The leaf frames of a stack taken inside a BPF program are the program and its dispatcher.
_BPF_FRAME_PREFIXES = ("bpf_prog_", "bpf_trace_run", "__bpf_trace_", "bpf_trampoline_")


def _without_bpf_frames(frames: list[Frame]) -> list[Frame]:
    skip = 0
    while skip < len(frames) - 1 and frames[skip].name.startswith(_BPF_FRAME_PREFIXES):
        skip += 1
    return frames[skip:]

