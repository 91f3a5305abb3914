"""The CPython frame source of the sampler: lists Python processes for the BPF walker
(bpf/python.h), drains the frames it recorded, symbolizes and merges them into samples.

Layouts mirrored from bpf/python.h: keep the two in step.
"""

from __future__ import annotations

import os
import struct
import threading
import time

from ...profile.model import Frame
from .code import CodeCache
from .detect import PythonProcess, detect
from .frames import RawPyFrame, eval_groups
from .merge import merge
from .offsets import FRAME_CFRAME, NONE

# struct py_proc
PY_PROC = struct.Struct("<QQ12H")
# struct py_frame, struct py_stack header
PY_FRAME = struct.Struct("<QQIB3x")
PY_STACK_HEADER = struct.Struct("<II")
PY_MAX_FRAMES = 96
# enum py_stat_index
PY_STAT_WALKS, PY_STAT_NO_THREAD, PY_STAT_TRUNCATED, PY_STAT_STACKS_FULL, PY_STAT_MAX = range(5)

# A process first seen before it runs CPython (still in the parent's code before exec, or before
# the interpreter is initialized) is looked at again at these ages (seconds since first seen).
RETRY_AGES = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


def proc_record(proc: PythonProcess) -> bytes:
    o = proc.offsets
    return PY_PROC.pack(
        proc.threads_head, o.code_tag_mask, o.thread_id, o.tstate_next, o.tstate_frame,
        o.cframe_current if o.frame_kind == FRAME_CFRAME else NONE, o.frame_code, o.frame_previous,
        o.frame_instr, o.frame_marker, o.co_argcount, o.co_flags, o.co_firstlineno, 0)


def parse_stack(raw: bytes) -> list[RawPyFrame]:
    n, _pid = PY_STACK_HEADER.unpack_from(raw)
    n = min(n, PY_MAX_FRAMES, (len(raw) - PY_STACK_HEADER.size) // PY_FRAME.size)
    out = []
    for i in range(n):
        code, instr, checksum, marker = PY_FRAME.unpack_from(raw, PY_STACK_HEADER.size + i * PY_FRAME.size)
        out.append(RawPyFrame(code, instr, marker, checksum))
    return out


def _identity(pid: int) -> tuple | None:
    """What changes when a pid is reused or the process execs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            start = f.read().rsplit(b")", 1)[1].split()[19]
        st = os.stat(f"/proc/{pid}/exe")
        return (start, st.st_dev, st.st_ino)
    except (OSError, IndexError):
        return None


class PythonUnwinder:
    """One per sampling session. Thread-safe: observe() runs on the pid watcher thread.

    `pids`: the sampler's pid filter, if any (only those processes are inspected at start).
    """

    def __init__(self, enabled: bool = True, pids: tuple[int, ...] = ()) -> None:
        self.enabled = enabled
        self._collection = None
        self._procs: dict[int, tuple[PythonProcess, tuple | None]] = {}
        self._retry: dict[int, tuple[float, int]] = {}    # pid -> (first seen, retries done)
        self._stacks: dict[int, list[RawPyFrame]] = {}
        self._lock = threading.Lock()
        self.codes = CodeCache()
        self._stat_totals = [0] * PY_STAT_MAX
        self._fsbase_offset = 0
        self._prefetch_buffer, self._prefetched = -1, set()
        if enabled:
            # Parsed before sampling starts (~0.5 s), so that the first interval is walked too.
            from ...ebpf import kernel_btf
            try:
                self._fsbase_offset = kernel_btf().member_offset("task_struct", "thread.fsbase")
            except (KeyError, OSError, ValueError):
                self.enabled = False     # no BTF: no Python frames; native profiling goes on
        # Processes already running are inspected now, before sampling starts, and listed for
        # the walker as soon as it is loaded: the first samples get their Python frames too.
        self._running: list[PythonProcess] = []
        if self.enabled:
            candidates = pids or [int(name) for name in os.listdir("/proc") if name.isdigit()]
            for pid in candidates:
                if (proc := detect(pid)) is not None:
                    self._running.append(proc)

    def start(self, collection) -> None:
        """Give the loaded sampler the kernel offset it needs, then list the Python processes
        already running (new ones arrive through observe())."""
        if not self.enabled:
            return
        collection.variable("py_fsbase_offset").set(self._fsbase_offset)
        self._collection = collection
        for proc in self._running:
            self._list(proc)
        self._running = []

    def observe(self, pid: int) -> PythonProcess | None:
        """Look at a newly seen process; list it for the walker if it runs CPython."""
        if not self.enabled or self._collection is None or pid in self._procs:
            return None
        proc = detect(pid)
        if proc is None:
            self._retry.setdefault(pid, (time.monotonic(), 0))
            return None
        self._retry.pop(pid, None)
        return proc if self._list(proc) else None

    def _list(self, proc: PythonProcess) -> bool:
        with self._lock:
            self._procs[proc.pid] = (proc, _identity(proc.pid))
            try:
                self._collection.maps["python_procs"].update(struct.pack("<I", proc.pid), proc_record(proc))
            except Exception:       # map full or session closing: this process stays native-only
                self._procs.pop(proc.pid, None)
                return False
        return True

    def retry_pending(self) -> None:
        now = time.monotonic()
        for pid, (first, tries) in list(self._retry.items()):
            if tries >= len(RETRY_AGES):
                self._retry.pop(pid, None)
            elif now - first >= RETRY_AGES[tries]:
                self._retry[pid] = (first, tries + 1)
                self.observe(pid)

    def prefetch(self, active_buffer: int) -> None:
        """Read the code objects of stacks recorded so far in the active buffer (called every
        ~100 ms), so that a process which exits before the interval ends keeps its names."""
        if self._collection is None:
            return
        self.retry_pending()
        stacks = self._collection.maps[f"py_stacks_{active_buffer}"]
        if active_buffer != self._prefetch_buffer:
            self._prefetch_buffer, self._prefetched = active_buffer, set()
        try:
            keys = [k for k in stacks.keys() if k not in self._prefetched]
            for key in keys:
                raw = stacks.lookup(key)
                self._prefetched.add(key)
                if raw is None:
                    continue
                pid = PY_STACK_HEADER.unpack_from(raw)[1]
                entry = self._procs.get(pid)
                if entry is not None:
                    o = entry[0].offsets
                    for f in parse_stack(raw):
                        self.codes.frame(pid, o, f.code, f.instr, f.checksum)
        except Exception:       # the session is closing under us
            return

    def drain(self, buffer: int) -> None:
        """Read and clear the Python stacks of a buffer the session just drained."""
        if self._collection is None:
            return
        stacks = self._collection.maps[f"py_stacks_{buffer}"]
        self._stacks = {struct.unpack_from("<Q", k)[0]: parse_stack(v) for k, v in stacks.drain()}

    def frames(self, pid: int, stack_id: int) -> list[list[Frame]]:
        """Leaf-first groups of symbolized Python frames (one group per evaluation-loop call)."""
        raw = self._stacks.get(stack_id)
        entry = self._procs.get(pid)
        if not raw or entry is None:
            return []
        proc = entry[0]
        o = proc.offsets
        return [[self.codes.frame(pid, o, f.code, f.instr, f.checksum) for f in group]
                for group in eval_groups(o, raw, proc.none)]

    def merge(self, pid: int, stack_id: int, native: list[Frame]) -> list[Frame]:
        groups = self.frames(pid, stack_id) if stack_id else []
        return merge(native, groups) if groups else native

    def stats(self) -> list[int]:
        """Counter deltas since the last call (enum py_stat_index order)."""
        if self._collection is None:
            return [0] * PY_STAT_MAX
        m = self._collection.maps["py_stats"]
        totals = [sum(struct.unpack_from("<Q", v)[0] for v in m.lookup_percpu(struct.pack("<I", i)))
                  for i in range(PY_STAT_MAX)]
        delta = [t - p for t, p in zip(totals, self._stat_totals)]
        self._stat_totals = totals
        return delta

    def forget_dead(self) -> None:
        """Drop processes that exited, were replaced by a new one under their pid, or exec'ed."""
        for pid, (_proc, ident) in list(self._procs.items()):
            if _identity(pid) != ident:
                with self._lock:
                    self._procs.pop(pid, None)
                self.codes.forget(pid)
                try:
                    self._collection.maps["python_procs"].delete(struct.pack("<I", pid))
                except Exception:
                    pass
                if ident is not None and _identity(pid) is not None:
                    self.observe(pid)      # same pid, new program: look again
        for pid in list(self._retry):
            if not os.path.exists(f"/proc/{pid}"):
                self._retry.pop(pid, None)
