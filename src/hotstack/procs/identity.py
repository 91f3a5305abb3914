"""What /proc tells of a process by its pid: its stat (start time, name, parent), executable,
namespaces and credentials; and the announcements the kernel's programs make of new processes,
which stand for a stat read."""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

from .proc_files import read_bytes


class Announced(NamedTuple):
    """What a program's announcement of a new process told of it (bpf/pids.h), from its main
    thread's task_struct at the sample: what /proc/PID/stat and /proc/PID/ns/mnt would say."""

    start_time: int      # clock ticks since boot, as /proc/PID/stat's
    comm: str            # the name of the image whose executable is exe_ino
    ppid: int
    mntns: int           # 0: not told
    exe_ino: int = 0     # 0: not told


# nanoseconds a clock tick of /proc/PID/stat's start time (the kernel's nsec_to_clock_t)
NS_PER_TICK = 10**9 // os.sysconf("SC_CLK_TCK")


def announced(start_ns: int, comm: bytes, ppid: int, mntns: int, exe_ino: int = 0) -> Announced | None:
    """The facts of an announcement record (None where it carries none: a start time of 0)."""
    if not start_ns:
        return None
    return Announced(start_ns // NS_PER_TICK, comm.split(b"\0", 1)[0].decode(errors="replace"), ppid, mntns,
                     exe_ino)


def read_stat(pid: int) -> tuple[int, str, int] | None:
    """(start time, comm, parent pid) of `pid` from /proc/PID/stat; None when it is gone. The comm
    is the one /proc/PID/comm shows (both print the task's name): one read serves both."""
    try:
        stat = read_bytes(f"/proc/{pid}/stat")
    except OSError:
        return None
    # comm may hold spaces and parens: the fields after it start at the last ')'.
    close = stat.rfind(b")")
    fields = stat[close + 2:].split()
    try:
        return int(fields[19]), stat[stat.find(b"(") + 1:close].decode(errors="replace"), int(fields[1])
    except (IndexError, ValueError):
        return None


def parent_pid(pid: int) -> int | None:
    """The pid of `pid`'s parent; None when it is gone."""
    stat = read_stat(pid)
    return stat[2] if stat is not None else None


def read_start_time(pid: int) -> int | None:
    stat = read_stat(pid)
    return stat[0] if stat is not None else None


def exe_identity(pid: int) -> tuple | None:
    """(device, inode) of the process's executable; None when it is gone."""
    try:
        st = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def mount_namespace(pid: int) -> int:
    """The mount namespace of a process (the inode number of /proc/PID/ns/mnt, as `ig` and
    `lsns` name it); 0 when it is gone or cannot be read."""
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return 0


def exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def exe_file_path(pid: int) -> str:
    """A path that opens the process's executable itself (the kernel's reference: valid in another
    mount namespace, deleted or replaced on disk)."""
    return f"/proc/{pid}/exe"


# The inode of the initial pid namespace (the kernel's PROC_PID_INIT_INO).
INIT_PID_NAMESPACE_INODE = 0xEFFFFFFC

@functools.cache


def own_host_pid() -> int:
    """This process's pid as the kernel's programs see it (in the host's pid namespace), or 0 where
    it runs in another namespace (there its pid may be another process's on the host). Read once:
    the engine and each sampler ask at start."""
    try:
        if os.stat("/proc/self/ns/pid").st_ino != INIT_PID_NAMESPACE_INODE:
            return 0
    except OSError:
        return 0
    return os.getpid()


def all_pids() -> list[int]:
    """Every process of this host (pid namespace) now."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


# A new process is looked at by the process table and then by every frame source's detection in
# the same pid-watcher round: with `recent=True` they share one read of its maps and of its


def namespace_pid(pid: int) -> int:
    """The pid of a process inside its own pid namespace (the pid in its perf map's name)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return pid


def credentials(pid: int) -> tuple[int, int] | None:
    """The real user and group ids of a process (as bpf_get_current_uid_gid gives them), None if it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            uid = gid = None
            for line in f:
                if line.startswith(b"Uid:"):
                    uid = int(line.split()[1])
                elif line.startswith(b"Gid:"):
                    gid = int(line.split()[1])
                    break
    except (OSError, ValueError, IndexError):
        return None
    return (uid, gid) if uid is not None and gid is not None else None

