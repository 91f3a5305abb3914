"""Reading another process's memory, for the runtimes' readers: through a procs.Process (a live
process, or one recorded into a directory for tests), whose `read` raises MemoryReadError where the
target exited or unmapped the memory; callers turn that into a truncated stack or an unresolved
frame, never a crash. `ProcessMemory(pid)` is the memory of the live process `pid`."""

from __future__ import annotations

from ...procs import LiveProcess, MemoryReadError, PagedMemory, Process
from ...procs.memory import MAX_READ

# the memory of a live process by pid (LiveProcess: one process_vm_readv a read)
ProcessMemory = LiveProcess


__all__ = ["MAX_READ", "MemoryReadError", "PagedMemory", "Process", "ProcessMemory"]
