"""What discovery.process labels a process with (its executable, working directory, command line
and cgroup), each read only when asked."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .proc_files import read_bytes


@dataclass(frozen=True)
class ProcessLabels:
    """What discovery.process labels a process with, each read only when asked ("" when not)."""

    exe: str = ""
    cwd: str = ""
    commandline: str = ""       # its arguments joined by spaces
    cgroup: str = ""            # /proc/PID/cgroup as it reads


def process_labels(pid: int, exe: bool, cwd: bool, commandline: bool, cgroup: bool) -> ProcessLabels | None:
    """The asked parts of what discovery.process shows of `pid`; None when it cannot be read (gone,
    or a kernel thread, which has no executable)."""
    base = f"/proc/{pid}"
    try:
        return ProcessLabels(
            os.readlink(f"{base}/exe") if exe else "",
            os.readlink(f"{base}/cwd") if cwd else "",
            read_bytes(f"{base}/cmdline").decode(errors="replace").replace("\0", " ").strip() if commandline else "",
            read_bytes(f"{base}/cgroup").decode(errors="replace") if cgroup else "")
    except OSError:
        return None

