"""The retry ladder every frame source (interpreters, V8, HotSpot) shares: a process first seen
before it runs the runtime (still in its parent's code before exec, the interpreter not
initialized, a JVM's code cache not made yet) is looked at again at `retry_ages`. That is only if
`_may_run(process)` says it could still become one (its maps or its executable name the runtime: a
host's other processes are looked at once, not seven times).

A source supplies `_find(process)` (what it needs to list the process, or None: not (yet) one),
`_may_run(process)` and `_list(pid, found)` (lists it for the kernel walker; False if it could not),
and keeps `_kernel` (None before attach), `_procs` (the processes listed: an entry each, whose
process `_entry_process` gives) and `_lock` (held while `_procs` changes). `forget(pid)` and
`forget_dead()` unlist a process; `_forget_state(pid, entry)` drops what else the source keeps of it.

What `_find` returns may be provisional (`_is_provisional(found)`): the runtime's file is mapped and
its state not made yet, and the walker can find the state itself once it is (CPython at its exec).
Such a process is listed at once and stays on the ladder until a look finds it made (then it is
listed again with what was found) or the ladder ends (then it is unlisted and said, as a process
never found is).
"""

from __future__ import annotations

from ..plugin import FrameSource
from .files import UNREAD, UnreadProcess

import time
from typing import Any

from ... import procs

# ages (seconds since first seen) at which a process not running the runtime yet is looked at again
RETRY_AGES = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


class RetryLadder(FrameSource):
    """A frame source that looks again, at `retry_ages`, at a process first seen before its runtime
    was ready."""

    retry_ages: tuple[float, ...] = RETRY_AGES
    _kernel: Any
    _procs: dict
    _lock: Any

    def __init__(self) -> None:
        # pid -> (first seen, retries done, the process it is read through)
        self._retry: dict[int, tuple[float, int, procs.Process]] = {}
        self._provisional: set[int] = set()               # listed, their state not confirmed yet

    def _find(self, process: procs.Process):
        raise NotImplementedError

    def _may_run(self, process: procs.Process) -> bool:
        """Whether a process `_find` turned down may still run the runtime later (reads of this
        round only)."""
        raise NotImplementedError

    def _list(self, pid: int, found) -> bool:
        raise NotImplementedError

    def _is_provisional(self, found) -> bool:
        """Whether what `_find` returned is listed before its runtime state is made (see above)."""
        return False

    def observe(self, process: procs.Process) -> bool:
        """Look at a newly seen process; list it for the walker if it runs the runtime."""
        pid = process.pid
        if self._kernel is None or (pid in self._procs and pid not in self._provisional):
            return False
        found = self._find(process)
        if found is None or self._is_provisional(found):
            if pid not in self._retry and (found is not None or self._may_run(process)):
                self._retry[pid] = (time.monotonic(), 0, process)
                # its walker verified now, while the runtime starts, and not once it runs: the
                # first JVM's code ran unnamed until the verifier was done (0.1-0.3 s here)
                self._kernel.ready()
            if found is None or pid in self._provisional:
                return False
            listed = self._list(pid, found)
            if listed:
                self._provisional.add(pid)
            return listed
        self._retry.pop(pid, None)
        self._provisional.discard(pid)
        return self._list(pid, found)

    def _retry_pending(self) -> None:
        """The retries now due (called every pid watcher round); a process gone is dropped."""
        if not self._retry:
            return
        now = time.monotonic()
        for pid, (first, tries, process) in list(self._retry.items()):
            if tries >= len(self.retry_ages):
                self._retry.pop(pid, None)
                if pid in self._provisional:
                    self.forget(pid)      # (its state never made: not left listed on a guess)
                    if _alive(process):
                        self._gave_up(process)
                elif _alive(process) and self._may_run(process):
                    self._gave_up(process)
            elif now - first >= self.retry_ages[tries]:
                if not _alive(process):
                    self._retry.pop(pid, None)
                    continue
                self._retry[pid] = (first, tries + 1, process)
                self.observe(process)

    def _gave_up(self, process: procs.Process) -> None:
        """A process that still looks like the runtime's and whose state was not found at the last
        retry: said, counted and explained (UNREAD), never left silent."""
        exe = process.exe_path()
        UNREAD.note(("retries", self.name, exe), UnreadProcess(
            process.pid, self.label, "", exe,
            f"its runtime state was not found in the {self.retry_ages[-1]:g} s after it was first seen "
            f"(not started yet, or a build whose layout hotstack does not read)"))

    def _retry_in(self) -> float | None:
        """Seconds until the next retry is due (None: none pending)."""
        if not self._retry:
            return None
        now, ages = time.monotonic(), self.retry_ages
        return max(0.0, min(first + ages[tries] - now if tries < len(ages) else 0.0
                            for first, tries, _process in self._retry.values()))

    @staticmethod
    def _sooner(a: float | None, b: float | None) -> float | None:
        return b if a is None else a if b is None else min(a, b)

    def _entry_process(self, entry) -> "procs.ProcessInfo | None":
        """The process a listed entry was read through: (what was read of it, process) by default."""
        return entry[1]

    def _forget_state(self, pid: int, entry) -> None:
        """Drop what the source keeps of `pid` besides its entry (names, caches); `entry`: the
        entry it was listed with, None if it was not listed. Called with `_lock` held, in the hold
        that removed the entry (stats() never sees a process in neither)."""

    def _drop(self, pid: int) -> None:
        """Unlist `pid` (its retries aside) and forget what was read of it."""
        with self._lock:
            entry = self._procs.pop(pid, None)
            self._forget_state(pid, entry)
        if entry is not None and self._kernel is not None:
            self._kernel.untrack(pid)

    def forget(self, pid: int) -> None:
        """`pid` exec'ed or exited: its runtime state is gone (a new one is observed anew)."""
        self._forget_retry(pid)
        self._drop(pid)

    def forget_dead(self) -> None:
        """Drop the processes that exited, were replaced by a new one under their pid, or exec'ed,
        and look again at what runs under the pid now."""
        for pid, entry in list(self._procs.items()):
            info = self._entry_process(entry)
            if info is not None and info.is_current():
                continue
            self._drop(pid)
            if info is not None and _alive(info.process):
                self.observe(info.process)      # same pid, new program: look again
        self._drop_dead_retries()

    def _forget_retry(self, pid: int) -> None:
        self._retry.pop(pid, None)
        self._provisional.discard(pid)

    def _drop_dead_retries(self) -> None:
        for pid, (_first, _tries, process) in list(self._retry.items()):
            if not _alive(process):
                self._forget_retry(pid)


def _alive(process: procs.Process) -> bool:
    """Whether the process is still there (its stat can be read)."""
    return process.stat() is not None
