"""What every interpreter frame source (CPython, Ruby, PHP, Perl) does the same way: processes
found before the sampler loads are listed at attach(); a process first seen before it runs the
interpreter is looked at again on the retry ladder (runtimes/common/retries.py, shared with V8 and
HotSpot); each listed process is given to the kernel walker with its record.

Every ~100 ms `poll` takes the stacks recorded since its last pass out of the active buffer and
names their frames (a process that exits before the interval ends keeps its names). It does
nothing while the walker has not walked since (one counter read), and after a pass that took
stacks, none for NAME_EVERY, or NAME_EVERY_SETTLED once no process was listed for SETTLED_S (V8
keeps NAME_EVERY, runtimes/v8/source.py): a process keeps the names of what it ran until that long
before its end, and of all it ran before. A newly listed process, and the walker
walking again after a quiet spell, are passed over at the next round. `collect` takes the rest of
a drained buffer's stacks, with those the passes took.

A source supplies `_find(process)` (memory and ELF reads only: the process, or None), `_may_run(process)`
(by default: its executable is named for the runtime or is its launcher), `_record(proc)` (its
kernel record, None if the layout cannot be expressed; by default `proc_record` packed from the
process's `record_fields`), `_entry(proc)` (what it keeps per process), `_tunable()` (the value its
kernel half is configured with), `_parse(raw)` (a recorded stack: frames leaf first, truncated,
pid) and `_name_early(pid, entry, frames)`. `prepare()` reads the thread pointer's offset that the
walkers find a thread's TLS with (a walker that needs none says so).
"""

from __future__ import annotations

import functools
import struct
import threading
import time
from typing import TYPE_CHECKING, Any

from ... import procs
from .files import runs_named
from .retries import RetryLadder


@functools.cache
def fsbase_offset() -> int | None:
    """task_struct's thread pointer offset (see InterpreterSource._prepare_fsbase), read from the
    kernel's BTF once: CPython's source reads it at start, while the BTF is loaded; the sources
    built later (runtimes/registry.py DeferredSource) would otherwise load the BTF again (~5 MB)."""
    import os

    from ...ebpf import kernel_btf
    member = "thread.uw.tp_value" if os.uname().machine == "aarch64" else "thread.fsbase"
    try:
        return kernel_btf().member_offset("task_struct", member)
    except (KeyError, OSError, ValueError):
        return None


if TYPE_CHECKING:   # the interface the sources implement (runtimes.py lists them: no import back)
    from ...bpf.record import Record
    from ..registry import RuntimeKernel

# After a naming pass that took stacks, the next one waits this long (seconds); V8 and HotSpot
# (runtimes/v8/source.py) name at most this often too. A process that exits keeps the names of what it
# ran until this long before its end (and of all it ran before, which repeats). A pass at every
# round of the pid watcher (~0.2 s) would mostly take again the stacks the last pass named (the
# walker stores a stack again once a pass took it).
NAME_EVERY = 0.5
# ... while a process was listed less than SETTLED_S ago; after that, NAME_EVERY_SETTLED. A process
# that has run a while has named most of what it runs (the walker skips those stacks): what it
# may lose at its exit is what it ran first in its last NAME_EVERY_SETTLED, where a short-lived
# process keeps its names to its last NAME_EVERY. Each pass costs its syscalls, and the walker
# stores again each stack a pass took: on the mixed load of bench/otel_profiler.py, passes every
# NAME_EVERY_SETTLED cost one half (19 Hz) to two thirds (99 Hz) of the CPU of passes every
# NAME_EVERY (bench/engine_parts.py); the stacks they leave are taken by the collect.
NAME_EVERY_SETTLED = 2.0
SETTLED_S = 10.0
# A pass due within this much (seconds) is made at the round at hand: the sources' passes keep to the
# same rounds, not one round each.
JOIN_S = 0.15
# Stacks a source keeps named across intervals, for a walker that skips them (Python's py_known,
# twice this size): a process that runs what it ran before then stores nothing, and its passes and
# drains take nothing. Past this many the walker stores the rest as it did without (taken per pass).
MAX_KNOWN = 2048
_U64 = struct.Struct("<Q")


class InterpreterSource(RetryLadder):
    def __init__(self) -> None:
        super().__init__()
        self._kernel: "RuntimeKernel | None" = None
        self._procs: dict[int, Any] = {}
        self._found: list = []                            # detected before attach()
        self._lock = threading.Lock()
        self._fsbase_offset = 0
        self._stacks: dict[int, tuple[list, bool]] = {}   # a drained buffer's stacks by key
        # per buffer, the stacks the passes took out of the kernel (parsed) by key, until the
        # buffer is drained; poll (the pid watcher) and collect (the engine's drain) run on
        # different threads, and what a pass took is only here: one lock for both
        self._early: dict[int, dict[bytes, tuple[list, bool]]] = {0: {}, 1: {}}
        self._drain_lock = threading.Lock()
        self._walks, self._settled = -1, False             # the walker's count at the last pass
        # A walker that remembers (RuntimeKernel.remembers): the stacks it was told userspace holds,
        # by key; their keys by pid; pids whose keys go at the first forget_dead after the next
        # collect (samples of the buffer being written may still name them), with the collect
        # count they were forgotten at.
        self._known: dict[int, tuple[list, bool]] = {}
        self._known_keys: dict[int, list[bytes]] = {}
        self._releasing_known: dict[int, int] = {}     # pid -> the collect after which its known stacks go
        self._collects = 0
        self._polled_buffer = -1
        self._next_pass = 0.0      # monotonic time before which no pass runs (after one that took stacks)
        self._listed_at = 0.0      # when the last process was listed (NAME_EVERY apart for SETTLED_S after)

    # -- what each source supplies ------------------------------------------------------------
    # the kernel record of a process (struct <runtime>_proc), for a source whose processes carry its
    # fields (`record_fields`)
    proc_record: "Record | None" = None

    def prepare(self) -> bool:
        return self._prepare_fsbase()

    def _may_run(self, process: procs.Process) -> bool:
        return runs_named(process, self.name)   # its executables only (as detect looks)

    def _record(self, proc) -> bytes | None:
        if self.proc_record is None:
            raise NotImplementedError
        try:
            return self.proc_record.pack(**proc.record_fields)
        except struct.error:        # a value out of its field's range: not a layout the walker reads
            return None

    def _entry(self, proc, process: procs.ProcessInfo | None):
        return proc, process

    def _tunable(self) -> int:
        return self._fsbase_offset

    def _parse(self, raw: bytes) -> tuple[list, bool, int]:
        raise NotImplementedError

    def _name_early(self, pid: int, entry, frames: list) -> None:
        raise NotImplementedError

    # -- the shared lifecycle (runtimes/registry.py) ---------------------------------------------
    def _prepare_fsbase(self) -> bool:
        """The walkers find a thread's TLS through its thread pointer in the task_struct (kernel
        BTF): thread.fsbase on x86-64, thread.uw.tp_value (TPIDR_EL0) on arm64. False without BTF:
        no frames of this runtime; native profiling goes on."""
        offset = fsbase_offset()
        if offset is None:
            return False
        self._fsbase_offset = offset
        return True

    def detect(self, process: procs.Process) -> bool:
        """Before sampling: remember `process` if it runs the interpreter (listed at attach())."""
        proc = self._find(process)
        if proc is not None:
            self._found.append(proc)
        return proc is not None

    def attach(self, kernel: "RuntimeKernel") -> None:
        kernel.configure(self._tunable())
        self._kernel = kernel
        for proc in self._found:
            self._track(proc)
        self._found = []

    def _list(self, pid: int, proc) -> bool:
        return self._track(proc)

    def _track(self, proc) -> bool:
        record = self._record(proc)
        if record is None:
            return False
        with self._lock:
            self._procs[proc.pid] = self._entry(proc, procs.read_process(proc.pid))
            if not self._kernel.track(proc.pid, record):
                self._procs.pop(proc.pid, None)
                return False
        self._next_pass = 0.0       # its first stacks are named at the next round
        self._listed_at = time.monotonic()
        return True

    def _pass_every(self, now: float) -> float:
        """Seconds between naming passes: NAME_EVERY while a process listed in the last SETTLED_S
        may be short-lived, NAME_EVERY_SETTLED after."""
        return NAME_EVERY if now - self._listed_at < SETTLED_S else NAME_EVERY_SETTLED

    def poll_in(self) -> float | None:
        """Seconds until this source wants its next poll (a retry due, its next naming pass; 0: the
        next round, to see the walker walk again), None while it follows no process."""
        if self._kernel is None:
            return None
        passes = max(0.0, self._next_pass - JOIN_S - time.monotonic()) if self._procs else None
        return self._sooner(self._retry_in(), passes)

    def tracking(self) -> bool:
        """True while processes of this runtime are followed (the engine then polls every round)."""
        return bool(self._procs) or bool(self._retry)

    def poll(self, active_buffer: int) -> None:
        """Called every ~100 ms: retries, then the stacks recorded since the last pass in the
        active buffer are taken out of the kernel and named while their process still runs."""
        if self._kernel is None:
            return
        self._retry_pending()
        if not self._procs:         # what the walker records is of listed processes only
            return
        now = time.monotonic()
        if now + JOIN_S < self._next_pass and active_buffer == self._polled_buffer:
            return
        try:
            if not self._due(active_buffer):
                # nothing stored (or walked) since the last pass: look again in NAME_EVERY, not at
                # every round (the counter read is a syscall, and the round a wake-up)
                self._next_pass = now + self._pass_every(now)
                return
            with self._drain_lock:
                parsed = self._early[active_buffer]
                # Taken, not read: a pass reads only what the walker stored since the last one (a
                # stack seen again is stored again: it was taken), not every record of the
                # interval, which would be most of a pass's cost (4 KiB a record).
                taken = self._kernel.take(active_buffer)
                new = []
                for key, raw in taken:
                    if key in parsed:
                        continue
                    frames, truncated, pid = self._parse(raw)
                    parsed[key] = (frames, truncated)
                    new.append((key, pid))
                    entry = self._procs.get(pid)
                    if entry is not None:
                        self._name_early(pid, entry, frames)
                self._remember(new, parsed)
        except Exception:       # the session is closing under us
            return
        if taken:
            self._next_pass = now + self._pass_every(now)

    def _due(self, active_buffer: int) -> bool:
        """Whether a naming pass can find anything: not if the walker has not stored a stack (one
        that remembers) or walked (one that does not) since the last pass, and that pass was itself
        a second look. (A walk counted just before a pass's counter read may store its stack just
        after the pass read the map: the next pass sees it). The read of the map is most of a
        pass's cost; the counter is one syscall."""
        count = self._kernel.stored() if self._remembers() else self._kernel.walks()
        if count == self._walks and self._settled and active_buffer == self._polled_buffer:
            return False
        self._settled = count == self._walks
        self._walks = count
        self._polled_buffer = active_buffer
        return True

    def _remembers(self) -> bool:
        return self._kernel is not None and self._kernel.remembers

    def _remember(self, new: list[tuple[bytes, int]], parsed: dict) -> None:
        """Keep these parsed stacks (key, pid) across intervals and tell the walker: it stores them
        no more. Only a listed process's, while there is room (the caller holds _drain_lock)."""
        if not new or not self._remembers():
            return
        keys = []
        for key, pid in new[:max(0, MAX_KNOWN - len(self._known))]:
            if pid in self._procs and pid not in self._releasing_known:
                self._known[_U64.unpack_from(key)[0]] = parsed[key]
                self._known_keys.setdefault(pid, []).append(key)
                keys.append(key)
        self._kernel.hold_keys(keys)

    def _stack(self, key: int) -> tuple[list, bool] | None:
        """A sample's recorded stack: stored in the drained buffer, or held from before."""
        found = self._stacks.get(key)
        return found if found is not None else self._known.get(key)

    def _release_known_stacks(self, pid: int) -> None:
        """`pid` exited or exec'ed: its stacks go at the first forget_dead after the next collect."""
        if pid in self._known_keys:
            self._releasing_known.setdefault(pid, self._collects)

    def _prune_known(self) -> None:
        """Drop the stacks of processes forgotten before the last collect (its samples are named)."""
        keys = []
        with self._drain_lock:
            for pid, at in list(self._releasing_known.items()):
                if at < self._collects:
                    del self._releasing_known[pid]
                    for key in self._known_keys.pop(pid, ()):
                        self._known.pop(_U64.unpack_from(key)[0], None)
                        keys.append(key)
        if keys:
            try:
                self._kernel.release_keys(keys)
            except Exception:   # closing under us
                pass

    def collect(self, buffer: int) -> None:
        """Take the stacks of a buffer the engine just drained: those the passes took out of it
        (parsed then) and the rest."""
        if self._kernel is None:
            return
        with self._drain_lock:
            self._collects += 1
            parsed, self._early[buffer] = self._early[buffer], {}
            stacks = {}
            new = []
            # a record never changes under its key (the walker stores a key's stack once per
            # interval, or again after a pass took it): what a pass parsed is not parsed again
            for k, v in self._kernel.take(buffer):
                stack = parsed.get(k)
                if stack is None:
                    frames, truncated, pid = self._parse(v)
                    stack = parsed[k] = (frames, truncated)
                    new.append((k, pid))
                stacks[_U64.unpack_from(k)[0]] = stack
            for k, stack in parsed.items():
                stacks.setdefault(_U64.unpack_from(k)[0], stack)
            try:
                self._remember(new, parsed)
            except Exception:   # closing under us
                pass
        self._stacks = stacks
