"""Reading another process's memory, for the runtimes' readers: through a procs.Process (a live
process, or one recorded into a directory for tests), whose `read` raises MemoryReadError where the
target exited or unmapped the memory; callers turn that into a truncated stack or an unresolved
frame, never a crash. A runtime's record of a process keeps the Process it was read through
(ReadThrough)."""

from __future__ import annotations

from ...procs import LiveProcess, MemoryReadError, PagedMemory, Process
from ...procs.memory import MAX_READ


class ReadThrough:
    """A runtime's record of one process (`pid`) that keeps the Process it was read through
    (`process`; None: the live process `pid`): its later reads (naming frames) go through it too."""

    __slots__ = ()
    pid: int
    process: Process | None

    @property
    def memory(self) -> Process:
        """What its memory is read through."""
        return self.process if self.process is not None else LiveProcess(self.pid)


__all__ = ["MAX_READ", "MemoryReadError", "PagedMemory", "Process", "ReadThrough"]
