"""Raw system calls: bpf(2), perf_event_open(2) and ioctl(2) through ctypes.

Only this module touches ctypes and syscall numbers; everything else passes
bytes-like attribute blocks in and gets file descriptors or errors back.
"""

from __future__ import annotations

import ctypes
import os
import platform

from .errors import SyscallError

_SYSCALLS = {
    # machine: (bpf, perf_event_open)
    "x86_64": (321, 298),
    "aarch64": (280, 241),
}

try:
    SYS_BPF, SYS_PERF_EVENT_OPEN = _SYSCALLS[platform.machine()]
except KeyError:  # pragma: no cover - depends on the host
    SYS_BPF = SYS_PERF_EVENT_OPEN = -1

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_ioctl = _libc.ioctl
_ioctl.restype = ctypes.c_int
_ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong)

# bpf() commands used by the loader.
BPF_MAP_CREATE = 0
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_PROG_LOAD = 5
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_MAP_FREEZE = 22
BPF_MAP_LOOKUP_BATCH = 24
BPF_MAP_LOOKUP_AND_DELETE_BATCH = 25
BPF_MAP_UPDATE_BATCH = 26
BPF_MAP_DELETE_BATCH = 27
BPF_ENABLE_STATS = 32

ATTR_SIZE = 128  # zero-padded; every kernel accepts a zero tail


def address(buf) -> int:
    """Address of a ctypes buffer (or 0 for None), for pointer fields of attrs."""
    return 0 if buf is None else ctypes.addressof(buf)


def bpf(cmd: int, attr: ctypes.Array, what: str) -> int:
    """Call bpf(cmd, attr); returns the result or raises SyscallError."""
    if SYS_BPF < 0:
        raise SyscallError(f"{what}: bpf() is not supported on {platform.machine()}", 38)
    ret = _syscall(SYS_BPF, ctypes.c_int(cmd), ctypes.byref(attr), ctypes.c_uint(ctypes.sizeof(attr)))
    if ret < 0:
        raise SyscallError.from_errno(what, ctypes.get_errno())
    return ret


def bpf_errno(cmd: int, attr: ctypes.Array) -> int:
    """Call bpf() and return 0 or the errno, for callers where failure is normal."""
    ret = _syscall(SYS_BPF, ctypes.c_int(cmd), ctypes.byref(attr), ctypes.c_uint(ctypes.sizeof(attr)))
    return 0 if ret >= 0 else ctypes.get_errno()


def perf_event_open(attr: ctypes.Array, pid: int, cpu: int, group_fd: int, flags: int) -> int:
    if SYS_PERF_EVENT_OPEN < 0:
        raise SyscallError(f"perf_event_open is not supported on {platform.machine()}", 38)
    ret = _syscall(SYS_PERF_EVENT_OPEN, ctypes.byref(attr), ctypes.c_int(pid), ctypes.c_int(cpu),
                   ctypes.c_int(group_fd), ctypes.c_ulong(flags))
    if ret < 0:
        raise SyscallError.from_errno(f"perf_event_open(cpu {cpu})", ctypes.get_errno())
    return ret


def ioctl(fd: int, request: int, arg: int, what: str) -> int:
    ret = _ioctl(fd, request, arg)
    if ret < 0:
        raise SyscallError.from_errno(what, ctypes.get_errno())
    return ret


def new_attr(size: int = ATTR_SIZE) -> ctypes.Array:
    return ctypes.create_string_buffer(size)


def close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
