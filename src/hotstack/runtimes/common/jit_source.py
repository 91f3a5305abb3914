"""JitSource: the lifecycle of a frame source whose kernel walker records, at their positions in
the native stack, the frames of a runtime that runs JIT code (V8, HotSpot): each runtime supplies
its layout, kernel record, names reader, stack parser and frame naming (the hooks below).

Processes are listed for the walker once their layout reads (a process first seen before it runs
the runtime is looked at again on the retry ladder). Every ~NAME_EVERY the stacks recorded so far
are named from the target's memory (so a process that exits mid-interval keeps its names), each
recorded stack once, with every distinct frame of a pass read once. collect() takes the drained
buffer's stacks, and merge puts the names in place of the native frames at the same positions.
"""

from __future__ import annotations

import struct
import threading
import time
from typing import TYPE_CHECKING, Any

from ... import procs
from ...profile.model import TRUNCATED, UNKNOWN, Frame
from .interpreter_source import NAME_EVERY
from .retries import RetryLadder
from .walker_totals import WalkerTotals

if TYPE_CHECKING:
    from ..registry import RuntimeKernel

_U64 = struct.Struct("<Q")


def cut_after(stack: list, last: int, runtime_frame=lambda f: f.name == UNKNOWN) -> list:
    """A leaf-first stack whose runtime walker stopped at its frame limit at native position `last`:
    [truncated] after it, and of the native frames rootward only those not `runtime_frame`: those
    are the runtime's own frames past the limit (JIT code without a symbol, V8's interpreter
    trampolines), which would read as made-up callers. Frames rootward of them (the runtime's
    entry from C++, thread start) stay."""
    rest = [f for f in stack[last + 1:] if not runtime_frame(f)]
    return stack[:last + 1] + [TRUNCATED] + rest


class JitSource(RetryLadder):
    """Thread-safe: observe() and poll() run on the engine's pid watcher thread."""

    # -- what each runtime supplies ----------------------------------------------------------------
    name: str
    looks_for: tuple[str, ...]
    stat_max: int                   # its walker's counters (bpf/schema.yaml)
    stat_frames: int                # the counter of frames recorded
    _stack_head: Any                # its stack record's schema (whose `truncated` says: cut)

    def _layout(self, process: procs.Process):
        """What the walker and the names need of the process's runtime, or None (not that runtime,
        or not ready yet: the retry ladder looks again)."""
        raise NotImplementedError

    def _may_run(self, process: procs.Process) -> bool:
        """Whether a process without a layout yet may get one later (the retry ladder)."""
        raise NotImplementedError

    def _record(self, layout) -> bytes:
        """The process's record for the kernel walker."""
        raise NotImplementedError

    def _names(self, pid: int, layout):
        """The reader that names this process's recorded frames."""
        raise NotImplementedError

    @staticmethod
    def _parse(raw: bytes) -> tuple[list[tuple], int]:
        """(frames, index first, pid) of a recorded stack."""
        raise NotImplementedError

    @staticmethod
    def _name_frame(names, frame: tuple) -> Frame | list[Frame] | None:
        raise NotImplementedError

    @staticmethod
    def _runtime_frame(frame: Frame) -> bool:
        """A native frame that stands for the runtime's own code (cut with the frames past the
        walker's limit): unnamed JIT code."""
        return frame.name == UNKNOWN

    # -- the lifecycle -------------------------------------------------------------------------
    def __init__(self) -> None:
        super().__init__()
        self._kernel: "RuntimeKernel | None" = None
        self._procs: dict[int, tuple[object, procs.ProcessInfo | None]] = {}   # (its names reader, the process)
        self._found: list[tuple[int, object]] = []
        self._stacks: dict[int, list[tuple]] = {}    # stack key -> recorded frames (index first)
        self._cut: set[int] = set()      # stacks the walker cut at its frame limit
        self._lock = threading.Lock()
        self._prefetch_buffer, self._prefetched = -1, set()
        # stack key -> (pid, named frames) of the passes over the active buffer, then of the drained one
        self._polled: dict[int, tuple[int, list]] = {}
        self._drained: dict[int, tuple[int, list]] = {}
        self._merge_memo: dict = {}
        self._named_at = 0.0
        self.attached = 0
        self._kernel_totals = WalkerTotals(self.stat_max)
        self._gone = [0, 0]      # functions named, read errors: of processes no longer listed

    def prepare(self) -> bool:
        return True

    def detect(self, process: procs.Process) -> bool:
        layout = self._layout(process)
        if layout is not None:
            self._found.append((process.pid, layout))
        return layout is not None

    def attach(self, kernel: "RuntimeKernel") -> None:
        kernel.configure(1)
        self._kernel = kernel
        for pid, layout in self._found:
            self._track(pid, layout)
        self._found = []

    def _find(self, process: procs.Process):
        return self._layout(process)

    def _list(self, pid: int, layout) -> bool:
        return self._track(pid, layout)

    @staticmethod
    def _identity(frame: tuple) -> tuple:
        """What a frame's name depends on: frames of one pass with the same identity are named once."""
        return frame[2], frame[3]

    def _name_all(self, pid: int, names, frames: list[tuple], memo: dict) -> list:
        """The name of each recorded frame (None: not named), each identity read once per `memo`."""
        out = []
        for frame in frames:
            ident = (pid, self._identity(frame))
            if ident in memo:
                out.append(memo[ident])
            else:
                out.append(memo.setdefault(ident, self._name_frame(names, frame)))
        return out

    def _named(self, pid: int, key: int, frames: list[tuple], names) -> list:
        """The names of a drained stack's frames: those its pass read, the rest read now."""
        polled = self._drained.get(key)
        if polled is None or polled[0] != pid or len(polled[1]) != len(frames):
            return self._name_all(pid, names, frames, self._merge_memo)
        named = polled[1]
        if None in named:
            named = [n if n is not None else self._name_all(pid, names, [f], self._merge_memo)[0]
                     for n, f in zip(named, frames)]
        return named

    def _track(self, pid: int, layout) -> bool:
        record = self._record(layout)
        with self._lock:
            self._procs[pid] = (self._names(pid, layout), procs.read_process(pid))
            if not self._kernel.track(pid, record):
                self._procs.pop(pid, None)
                return False
        self.attached += 1
        return True

    def poll_in(self) -> float | None:
        """Seconds until this source wants its next poll (a retry due, its next naming pass), None
        while it follows no process."""
        if self._kernel is None:
            return None
        passes = max(0.0, self._named_at + NAME_EVERY - time.monotonic()) if self._procs else None
        return self._sooner(self._retry_in(), passes)

    def tracking(self) -> bool:
        """True while processes of this runtime are followed (the engine then polls every round)."""
        return bool(self._procs) or bool(self._retry)

    def poll(self, active_buffer: int) -> None:
        """Name the functions of stacks recorded so far (called every ~100 ms)."""
        if self._kernel is None:
            return
        self._retry_pending()
        if not self._procs:         # the walker records stacks of listed processes only
            return
        now = time.monotonic()
        if active_buffer == self._prefetch_buffer and now - self._named_at < NAME_EVERY:
            return
        self._named_at = now
        if active_buffer != self._prefetch_buffer:
            self._prefetch_buffer, self._prefetched, self._polled = active_buffer, set(), {}
        memo: dict = {}
        try:
            for key, raw in self._kernel.recorded(active_buffer, self._prefetched):
                self._prefetched.add(key)
                frames, pid = self._parse(raw)
                entry = self._procs.get(pid)
                if entry is not None:
                    self._polled[_U64.unpack_from(key)[0]] = (pid, self._name_all(pid, entry[0], frames, memo))
        except Exception:       # the session is closing under us
            return

    def collect(self, buffer: int) -> None:
        if self._kernel is None:
            return
        self._stacks, self._cut = {}, set()
        for k, v in self._kernel.take(buffer):
            key = _U64.unpack_from(k)[0]
            self._stacks[key] = self._parse(v)[0]
            if self._stack_head.unpack(v).truncated:
                self._cut.add(key)
        self._drained, self._merge_memo = (self._polled if buffer == self._prefetch_buffer else {}), {}
        if buffer == self._prefetch_buffer:
            self._prefetch_buffer, self._polled = -1, {}

    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]:
        """The native frames with the runtime's at the positions the walker recorded them (a frame
        named as several, a compiled frame with its inlined methods, takes its one position), cut
        after the last of them where the walker stopped at its frame limit (cut_after)."""
        frames = self._stacks.get(key) if key else None
        entry = self._procs.get(pid)
        if not frames or entry is None:
            return native
        slots: list[Frame | list[Frame]] = list(native)
        changed = False
        for frame, named in zip(frames, self._named(pid, key, frames, entry[0])):
            index = frame[0]
            if index < len(slots) and named is not None:
                slots[index] = named
                changed = True
        if key in self._cut:
            slots = cut_after(slots, max(f[0] for f in frames), self._runtime_frame)
        elif not changed:
            return native
        out: list[Frame] = []
        for slot in slots:
            if isinstance(slot, list):
                out.extend(slot)
            else:
                out.append(slot)
        return out

    def counters(self) -> list[int]:
        """The walker's counter deltas (enum v8_stat order)."""
        if self._kernel is None:
            return [0] * self.stat_max
        return self._kernel.counters()

    def stats(self) -> dict[str, int]:
        """For the agent's debug info and /metrics: processes listed now; since the start, frames the
        kernel recorded, functions named and memory reads that failed."""
        totals = self._kernel_totals.update(self._kernel)
        with self._lock:
            entries = [e[0] for e in self._procs.values()]
        return {"processes": len(entries), "frames": totals[self.stat_frames],
                "functions_named": self._gone[0] + sum(n.named for n in entries),
                "read_errors": self._gone[1] + sum(n.read_errors for n in entries)}

    def _forget_state(self, pid: int, entry) -> None:
        if entry is not None:
            self._gone[0] += entry[0].named
            self._gone[1] += entry[0].read_errors


__all__ = ["JitSource", "cut_after"]
