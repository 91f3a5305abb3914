"""/proc files that are not a profiled process's: hotstack's own process (its capabilities, a path
that opens a descriptor it holds) and the kernel's (sysctls, mounts, its configuration and symbols).
Kept here with every other /proc path: procs/ is hotstack's one reader of /proc."""

from __future__ import annotations

import re

from .proc_files import read_text

KALLSYMS = "/proc/kallsyms"             # the kernel's symbols (symbols/kallsyms.py parses it)
KERNEL_CONFIG = "/proc/config.gz"       # the running kernel's configuration, where it is built in
_UNDER_ROOT = re.compile(r"/proc/\d+/root/")


def descriptor_path(fd: int) -> str:
    """A path that opens the file hotstack's descriptor `fd` is open on (deleted, or in another
    mount namespace, too)."""
    return f"/proc/self/fd/{fd}"


def is_proc_path(path: str) -> bool:
    """Whether `path` is under /proc (a process's file, a descriptor's path): not a file's own path."""
    return path == "/proc" or path.startswith("/proc/")


def is_under_process_root(path: str) -> bool:
    """Whether `path` opens a file under a process's root (/proc/PID/root/...)."""
    return _UNDER_ROOT.match(path) is not None


def own_status(field: str) -> str | None:
    """The value of a field (`CapEff` ...) of hotstack's own /proc/self/status; None if unread."""
    try:
        text = read_text("/proc/self/status")
    except OSError:
        return None
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name == field:
            return value.strip()
    return None


def sysctl(name: str) -> str | None:
    """A kernel setting by its sysctl name (`kernel.perf_event_paranoid`); None if unread."""
    try:
        return read_text("/proc/sys/" + name.replace(".", "/")).strip()
    except OSError:
        return None


def mounts() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each of hotstack's mounts; [] if unread."""
    try:
        text = read_text("/proc/mounts")
    except OSError:
        return []
    return [(fields[1], fields[2]) for fields in (line.split() for line in text.splitlines()) if len(fields) > 2]
