"""CpuProfiler: the engine behind both front doors.

Sampling session + process table + symbolizer -> one Profile per interval.
A background thread drains the kernel's `new_pids` map every 100 ms so that a
process's maps are read while it still runs, even if it exits before the
interval's samples are read. The same thread moves user-stack snapshots out of
the kernel's ring buffer; they are unwound (hotstack.unwind) when the interval is
collected, before symbolization.
"""

from __future__ import annotations

import struct
import queue
import threading

from ..procs import ProcessTable
from ..profile.model import Frame, Profile, Sample
from ..symbols.symbolizer import Symbolizer
from ..unwind import Unwinder
from ..unwind.python.unwinder import PythonUnwinder
from .lifecycle import IntervalProfiler
from .obi import trace_labels
from .session import RawBatch, RawSample, SamplerConfig, SamplingSession

_LOST_USER = Frame("[lost user stack]", resolved=False)
_LOST_KERNEL = Frame("[lost kernel stack]", resolved=False)


class CpuProfiler(IntervalProfiler):
    def __init__(self, config: SamplerConfig, symbolizer: Symbolizer | None = None,
                 processes: ProcessTable | None = None, watch_interval_s: float = 0.1) -> None:
        self.config = config
        self.processes = processes if processes is not None else ProcessTable()
        self.symbolizer = symbolizer if symbolizer is not None else Symbolizer(self.processes)
        self.session = SamplingSession(config)
        self.unwinder = Unwinder(self.processes)
        self.session.early_unwind = lambda pid, ip, sp, bp, stack: self.unwinder.unwind(pid, ip, sp, bp, stack)[0]
        self._snapshot_pids: set[int] = set()
        self._to_classify: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._classifier: threading.Thread | None = None
        self.python = PythonUnwinder(enabled=config.python_enabled, pids=config.pids)
        self._watch_interval = watch_interval_s
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        # Processes named by --pid are classified before the first sample, not 100 ms later.
        marked = tuple(pid for pid in self.config.pids if self._wants_snapshots(pid))
        self._snapshot_pids.update(marked)
        # Parse kallsyms now, not in the first interval, and while the kernel verifies the
        # programs (the bpf() call releases the GIL): start-up is that much shorter.
        kallsyms = threading.Thread(target=lambda: self.symbolizer.kernel, name="hotstack-kallsyms", daemon=True)
        kallsyms.start()
        self.session.start(snapshot_pids=marked)
        self.python.start(self.session._collection)
        kallsyms.join()
        self._watcher = threading.Thread(target=self._watch_new_pids, name="hotstack-pids", daemon=True)
        self._watcher.start()
        self._classifier = threading.Thread(target=self._unwind_loop, name="hotstack-unwind", daemon=True)
        self._classifier.start()

    def _watch_new_pids(self) -> None:
        while not self._stop.wait(self._watch_interval):
            self.observe_new_pids()

    def observe_new_pids(self) -> None:
        collection = self.session._collection
        if collection is None:
            return
        try:
            entries = collection.maps["new_pids"].drain()
        except Exception:   # the session is closing under us
            return
        for key, _ in entries:
            pid = struct.unpack_from("<I", key)[0]
            self.processes.observe(pid)
            if self.config.unwind == "auto" and pid not in self._snapshot_pids:
                self._to_classify.put(pid)
            self.python.observe(struct.unpack_from("<I", key)[0])
        self.python.prefetch(self.session._active)

    def _unwind_loop(self) -> None:
        """Drains the snapshot ring (unwinding as it goes) and marks new processes built without
        frame pointers for snapshots (unwind mode "auto").

        Its own thread, apart from the watcher: a first parse of a binary's table can take a
        second, and new processes' maps must be read before they exit all the same.
        """
        while not self._stop.wait(self._watch_interval):
            try:
                while True:
                    try:
                        pid = self._to_classify.get_nowait()
                    except queue.Empty:
                        break
                    info = self.processes.get(pid)
                    if info is not None and pid not in self._snapshot_pids and self.unwinder.needs_snapshots(info):
                        self.session.mark_snapshot_pid(pid)
                        self._snapshot_pids.add(pid)
                    self.session.poll_snapshots()
                self.session.poll_snapshots()
            except Exception:
                if self.session._collection is None:   # the session is closing under us
                    return

    def _wants_snapshots(self, pid: int) -> bool:
        """Observe a process; True if its user stacks need snapshots (unwind mode "auto")."""
        info = self.processes.observe(pid)
        return self.config.unwind == "auto" and info is not None and self.unwinder.needs_snapshots(info)

    def collect(self) -> Profile:
        """The profile of everything sampled since the last collect."""
        self.observe_new_pids()
        batch = self.session.collect()
        self.python.drain(self.session._active ^ 1)   # Python stacks of the buffer just drained
        profile = self.to_profile(batch)
        self._forget_dead()
        return profile

    def to_profile(self, batch: RawBatch) -> Profile:
        samples = [self._sample(raw) for raw in batch.samples + self.unwind_snapshots(batch)]
        return Profile(samples=samples, start_ns=batch.start_ns, duration_ns=batch.end_ns - batch.start_ns,
                       frequency_hz=self.config.frequency, stats=batch.stats)

    def unwind_snapshots(self, batch: RawBatch) -> list[RawSample]:
        """The batch's user-stack snapshots, unwound and counted per distinct stack."""
        counts: dict[tuple, int] = {}
        for snap in batch.snapshots:
            user = snap.unwound if snap.unwound is not None else \
                self.unwinder.unwind(snap.pid, snap.ip, snap.sp, snap.bp, snap.stack)[0]
            key = (snap.pid, snap.tid, snap.comm, user, snap.kernel_stack, snap.kernel_stack_lost, snap.python_stack,
                   snap.trace)
            counts[key] = counts.get(key, 0) + 1
        return [RawSample(pid, tid, comm, user, kernel, count, kernel_stack_lost=klost, python_stack=py, trace=trace)
                for (pid, tid, comm, user, kernel, klost, py, trace), count in counts.items()]

    def _sample(self, raw: RawSample) -> Sample:
        stack: list[Frame] = []
        if raw.kernel_stack:
            stack.extend(self.symbolizer.kernel_frames(list(raw.kernel_stack)))
        elif raw.kernel_stack_lost:
            stack.append(_LOST_KERNEL)
        user = self.symbolizer.user_frames(raw.pid, list(raw.user_stack)) if raw.user_stack else []
        user = self.python.merge(raw.pid, raw.python_stack, user)
        if user:
            stack.extend(user)
        elif raw.user_stack_lost:
            stack.append(_LOST_USER)
        info = self.processes.get(raw.pid) if raw.pid else None
        labels = (("container_id", info.container_id),) if info is not None and info.container_id else ()
        labels += trace_labels(raw.trace[:16], raw.trace[16:])
        return Sample(tuple(stack), raw.count, raw.pid, raw.tid, raw.comm, labels)

    def _forget_dead(self) -> None:
        self.processes.forget_dead()
        for pid in list(self._snapshot_pids):
            if self.processes.get(pid) is None or not self.processes.get(pid).alive:
                self._snapshot_pids.discard(pid)
                try:
                    self.session.forget_snapshot_pid(pid)
                except Exception:
                    pass
        for pid in self.unwinder.cached_pids():
            info = self.processes.get(pid)
            if info is None or not info.alive:
                self.unwinder.forget(pid)
        self.python.forget_dead()
