"""V8Source: the V8 (Node.js) frame source (unwind/runtimes.py).

A process runs V8 if its executable (or a mapped libnode) carries V8's post-mortem metadata;
nothing is read from the process to list it, so it is listed from its first sample. The kernel
half (bpf/v8.h) records JavaScript frames while the in-kernel unwinder walks them; this side
names them from the target's memory (every ~0.5 s for the stacks recorded so far, so a process
that exits mid-interval keeps its names) and puts the names in place of the native frames at
the same positions. Each recorded stack is named once: at the first pass that sees it, with every
distinct frame of the pass read once; merge takes those names (only stacks recorded after the last
pass, and frames that pass could not name, are read at collect). Frames need the kernel unwinder (`--unwind kernel`): it is what walks the
JIT code and calls the hook.
"""

from __future__ import annotations

import os
import re
import struct
import threading
import time
from typing import TYPE_CHECKING

from ... import procs
from ...bpf import schema
from ...profile.model import TRUNCATED, UNKNOWN, Frame
from ..interpreter_source import NAME_EVERY
from ..retries import RetryLadder
from ..runtime_files import UNREAD, Unreadable, UnreadProcess
from .metadata import V8Layout, checked_binary_layout
from .names import Names

if TYPE_CHECKING:
    from ..runtimes import RuntimeKernel

_NODE = re.compile(r"(?:^|/)(?:node(?:js)?\d*|libnode\.so[.\d]*)$")
_U64 = struct.Struct("<Q")



def parse_stack(raw: bytes) -> tuple[list[tuple[int, int, int, int]], int]:
    """((index, pc, function, marker) per recorded frame, pid) of a struct v8_stack."""
    head = schema.V8_STACK.unpack(raw)
    size = schema.V8_FRAME.size
    n = min(head.len, schema.V8_MAX_FRAMES, (len(raw) - schema.V8_STACK_TAIL_OFFSET) // size)
    unpack = schema.V8_FRAME.struct.unpack_from
    frames = []
    for i in range(n):
        index, pc, function, marker = unpack(raw, schema.V8_STACK_TAIL_OFFSET + i * size)
        frames.append((index, pc, function, marker))
    return frames, head.pid


def _v8_files(pid: int) -> list[tuple[str, str]]:
    """Files of a `node*` process that may hold V8, each as a path that opens the very file it runs
    (procs.mapped_file_path), and the path its maps show: the executable, and a mapped libnode
    (Debian's node links it). Other executables are not looked into: this runs for every new process."""
    exe = procs.exe_path(pid, recent=True)
    if not _NODE.search(exe.removesuffix(" (deleted)")):
        return []
    out = [(f"/proc/{pid}/exe", exe)]
    if "libnode.so" in procs.exec_paths(pid, recent=True):
        for m in procs.read_exec_maps(pid, recent=True):
            if m.is_file and "libnode.so" in m.file_path:
                path = procs.mapped_file_path(pid, m)
                if path is not None:
                    out.append((path, m.file_path))
                    break
    return out


def cut_after(stack: list, last: int, runtime_frame=lambda f: f.name == UNKNOWN) -> list:
    """A leaf-first stack whose runtime walker stopped at its frame limit at native position `last`:
    [truncated] after it, and of the native frames rootward only those not `runtime_frame`: those
    are the runtime's own frames past the limit (JIT code without a symbol, V8's interpreter
    trampolines), which would read as made-up callers. Frames rootward of them (the runtime's
    entry from C++, thread start) stay."""
    rest = [f for f in stack[last + 1:] if not runtime_frame(f)]
    return stack[:last + 1] + [TRUNCATED] + rest


def _v8_frame(frame: Frame) -> bool:
    """A native frame that stands for JavaScript: JIT code (no symbol) or a builtin (the
    interpreter's trampolines, the entries from C++ are builtins too but run no JavaScript
    themselves; they are cut with the rest, as the walker cannot tell which JS frames they ran)."""
    return frame.name == UNKNOWN or frame.name.startswith("Builtins_")


class V8Source(RetryLadder):
    """Thread-safe: observe() and poll() run on the engine's pid watcher thread.

    The lifecycle here is shared with HotSpotSource (unwind/hotspot/source.py), which supplies its
    own _layout, _record, _names, _parse and _name_frame. A process first seen before it runs node
    (a fork that has not exec'ed yet) is looked at again on the retry ladder (unwind/retries.py)."""

    name = "v8"
    looks_for = ("node",)         # (_v8_files: a node* executable)
    stat_max = schema.V8_STAT_MAX
    stat_frames = schema.V8_STAT_FRAMES

    def __init__(self) -> None:
        super().__init__()
        self._kernel: "RuntimeKernel | None" = None
        self._layouts: dict[tuple, V8Layout | Unreadable | None] = {}
        self._procs: dict[int, tuple[Names, procs.Process | None]] = {}
        self._found: list[tuple[int, V8Layout]] = []
        self._stacks: dict[int, list[tuple[int, int, int, int]]] = {}
        self._cut: set[int] = set()      # stacks the walker cut at its frame limit
        self._lock = threading.Lock()
        self._prefetch_buffer, self._prefetched = -1, set()
        # stack key -> (pid, named frames) of the passes over the active buffer, then of the drained one
        self._polled: dict[int, tuple[int, list]] = {}
        self._drained: dict[int, tuple[int, list]] = {}
        self._merge_memo: dict = {}
        self._named_at = 0.0
        self.attached = 0
        self._kernel_totals = [0] * self.stat_max
        self._gone = [0, 0]      # functions named, read errors: of processes no longer listed

    def prepare(self) -> bool:
        return True

    def _layout(self, pid: int) -> V8Layout | None:
        """The V8 layout of the node that `pid` runs (None if none); a node whose files hold no
        layout this reader takes is noted once (runtime_files.UNREAD)."""
        refused: tuple | None = None
        for path, shown in _v8_files(pid):
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if key not in self._layouts:
                try:
                    self._layouts[key] = checked_binary_layout(path)
                except Unreadable as e:
                    self._layouts[key] = e
            found = self._layouts[key]
            if isinstance(found, Unreadable):
                refused = (key, shown, found)
            elif found is not None:
                return found
        if refused is not None:
            key, shown, e = refused
            UNREAD.note(key, UnreadProcess(pid, "Node.js", "", shown, e.reason))
        return None

    def _may_run(self, pid: int) -> bool:
        """Whether a process without a layout yet may get one later: a `node*` executable (reads
        of this round). Other processes of the host are looked at once."""
        return bool(_v8_files(pid))

    def detect(self, pid: int) -> bool:
        layout = self._layout(pid)
        if layout is not None:
            self._found.append((pid, layout))
        return layout is not None

    def attach(self, kernel: "RuntimeKernel") -> None:
        kernel.configure(1)
        self._kernel = kernel
        for pid, layout in self._found:
            self._track(pid, layout)
        self._found = []

    def _find(self, pid: int) -> V8Layout | None:
        return self._layout(pid)

    def _list(self, pid: int, layout: V8Layout) -> bool:
        return self._track(pid, layout)

    def _record(self, layout: V8Layout) -> bytes:
        return schema.V8_PROC.pack(off_function=layout.fp_function, off_marker=layout.fp_context)

    def _names(self, pid: int, layout: V8Layout) -> Names:
        return Names(pid, layout)

    _parse = staticmethod(parse_stack)
    _stack_head = schema.V8_STACK       # whose `truncated` says the walker stopped at its frame limit

    @staticmethod
    def _name_frame(names: Names, frame: tuple) -> Frame | None:
        _index, _pc, function, marker = frame
        return names.frame(function, marker)

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

    def _track(self, pid: int, layout: V8Layout) -> bool:
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
        """The native frames with JavaScript ones at the positions the walker recorded them."""
        frames = self._stacks.get(key) if key else None
        entry = self._procs.get(pid)
        if not frames or entry is None:
            return native
        out = list(native)
        changed = False
        for frame, named in zip(frames, self._named(pid, key, frames, entry[0])):
            index = frame[0]
            if index >= len(out):
                continue
            if named is not None:
                out[index] = named
                changed = True
        if key in self._cut:
            return cut_after(out, max(f[0] for f in frames), _v8_frame)
        return out if changed else native

    def counters(self) -> list[int]:
        """The walker's counter deltas (enum v8_stat order)."""
        if self._kernel is None:
            return [0] * self.stat_max
        return self._kernel.counters()

    def stats(self) -> dict[str, int]:
        """For the agent's debug info and /metrics: processes listed now; since the start, frames the
        kernel recorded, functions named and memory reads that failed."""
        if self._kernel is not None:
            try:
                for i, delta in enumerate(self._kernel.counters()):
                    self._kernel_totals[i] += delta
            except Exception:       # the session is closing
                pass
        with self._lock:
            entries = [e[0] for e in self._procs.values()]
        return {"processes": len(entries), "frames": self._kernel_totals[self.stat_frames],
                "functions_named": self._gone[0] + sum(n.named for n in entries),
                "read_errors": self._gone[1] + sum(n.read_errors for n in entries)}

    def forget(self, pid: int) -> None:
        self._forget_retry(pid)
        with self._lock:
            found = self._procs.pop(pid, None)
            if found is not None:
                self._gone[0] += found[0].named
                self._gone[1] += found[0].read_errors
        if found is not None and self._kernel is not None:
            self._kernel.untrack(pid)

    def forget_dead(self) -> None:
        for pid, (_names, process) in list(self._procs.items()):
            if process is not None and process.is_current():
                continue
            self.forget(pid)
            if process is not None and procs.exists(pid):
                self.observe(pid)


__all__ = ["V8Source", "parse_stack"]
