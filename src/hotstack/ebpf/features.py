"""What this kernel's BPF accepts, found by probing it (tiny map creations and program loads),
never by its version number: distributions backport features, and a version says nothing of
how a kernel was configured. Each answer is probed once per process.

The version after each feature ("5.15+") is only for the one-line messages that name what is
off and which Linux brings it; no decision is taken on it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
from dataclasses import dataclass

from . import syscalls as sc
from .errors import SyscallError

# Program types used by the probes.
PROG_SOCKET_FILTER = 1
PROG_KPROBE = 2
PROG_PERF_EVENT = 7

# Map types and flags.
MAP_HASH = 1
MAP_ARRAY = 2
MAP_RINGBUF = 27
BPF_F_NO_PREALLOC = 1
BPF_F_RDONLY_PROG = 1 << 7


@dataclass(frozen=True)
class Helper:
    name: str
    id: int        # its number in the kernel's helper table (uapi bpf.h)
    since: str     # the mainline release that brought it, for messages


# The helpers whose absence on an older kernel changes what hotstack can do.
HELPERS = {h.name: h for h in (
    Helper("bpf_probe_read_user", 112, "5.5"),
    Helper("bpf_ringbuf_reserve", 131, "5.8"),
    Helper("bpf_get_current_task_btf", 158, "5.11"),
    Helper("bpf_ktime_get_coarse_ns", 160, "5.11"),
    Helper("bpf_get_func_ip", 173, "5.15"),
    Helper("bpf_task_pt_regs", 175, "5.15"),
    Helper("bpf_find_vma", 180, "5.17"),
    Helper("bpf_loop", 181, "5.17"),
)}
HELPERS_BY_ID = {h.id: h for h in HELPERS.values()}

# The verifier's words for a helper a program may not call: unknown to this kernel ("invalid func
# unknown#N"), or known but not offered to this program type (5.x: "unknown func bpf_x#N", 6.x:
# "program of this type cannot use helper bpf_x#N" or "func bpf_x#N not supported for program type").
_UNKNOWN_HELPER = ("invalid func unknown#", "unknown func ", "cannot use helper ", " not supported for program type")


def _load(prog_type: int, insns: bytes, log_size: int = 4096) -> tuple[int, str]:
    """Load a program; (0, "") if the kernel took it, else (errno, verifier log)."""
    code = ctypes.create_string_buffer(insns, len(insns))
    license = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(log_size)
    attr = sc.new_attr()
    struct.pack_into("<IIQQIIQ", attr, 0, prog_type, len(insns) // 8, sc.address(code), sc.address(license),
                     1, log_size, sc.address(log))
    try:
        fd = sc.bpf(sc.BPF_PROG_LOAD, attr, "probe load")
    except SyscallError as e:
        return e.errno or -1, log.value.decode("utf-8", "replace")
    os.close(fd)
    return 0, ""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


_MOV_R0_0 = _insn(0xb7)          # r0 = 0
_EXIT = _insn(0x95)


@functools.cache
def can_probe() -> bool:
    """Whether this process may load programs at all; without that the probes below cannot tell."""
    return _load(PROG_SOCKET_FILTER, _MOV_R0_0 + _EXIT)[0] == 0


@functools.cache
def helper_available(name: str, prog_type: int = PROG_PERF_EVENT) -> bool:
    """Whether programs of `prog_type` may call the helper on this kernel.

    Where no program can be loaded (no privileges: can_probe), the helper counts as present: the
    real load then fails on the privileges, with its own error."""
    helper = HELPERS[name]
    # A call with whatever is in r1-r5: a known helper fails on its arguments, an unknown one on its number.
    errno_, log = _load(prog_type, _insn(0x85, imm=helper.id) + _MOV_R0_0 + _EXIT)
    if errno_ == 0:
        return True
    return not any(word in log for word in _UNKNOWN_HELPER)


def _create_map(map_type: int, key_size: int, value_size: int, max_entries: int, flags: int = 0) -> int:
    attr = sc.new_attr()
    struct.pack_into("<IIIII", attr, 0, map_type, key_size, value_size, max_entries, flags)
    return sc.bpf(sc.BPF_MAP_CREATE, attr, "probe map")


@functools.cache
def map_type_available(map_type: int) -> bool:
    sizes = {MAP_RINGBUF: (0, 0, 4096)}.get(map_type, (4, 8, 1))
    try:
        os.close(_create_map(map_type, *sizes))
        return True
    except SyscallError:
        return False


@functools.cache
def global_data() -> bool:
    """Read-only BPF global data (.rodata constants, frozen maps): Linux 5.2."""
    try:
        fd = _create_map(MAP_ARRAY, 4, 8, 1, BPF_F_RDONLY_PROG)
    except SyscallError:
        return False
    try:
        attr = sc.new_attr()
        struct.pack_into("<I", attr, 0, fd)
        sc.bpf(sc.BPF_MAP_FREEZE, attr, "probe freeze")
        return True
    except SyscallError:
        return False
    finally:
        os.close(fd)


@functools.cache
def perf_event_dynamic_hash() -> bool:
    """Whether perf_event programs may use hash maps without preallocation (BPF_F_NO_PREALLOC).

    Kernels before 6.1 allowed only preallocated hash maps there (an element could not be
    allocated in NMI context); the loader then preallocates such maps instead."""
    try:
        fd = _create_map(MAP_HASH, 8, 8, 1, BPF_F_NO_PREALLOC)
    except SyscallError:
        return False
    try:
        ld_map = _insn(0x18, dst=1, src=1, imm=fd) + _insn(0)   # r1 = map (BPF_PSEUDO_MAP_FD)
        errno_, _log = _load(PROG_PERF_EVENT, ld_map + _MOV_R0_0 + _EXIT)
        return errno_ == 0
    finally:
        os.close(fd)


@functools.cache
def memcg_accounting() -> bool:
    """Whether BPF memory is charged to memory cgroups (5.11) rather than to RLIMIT_MEMLOCK.

    Both came in the same release as bpf_ktime_get_coarse_ns; its presence tells them apart
    (the same probe libbpf and bpftool rely on)."""
    return helper_available("bpf_ktime_get_coarse_ns", PROG_SOCKET_FILTER)


def kernel_btf() -> bool:
    return os.path.exists("/sys/kernel/btf/vmlinux")


ENOTSUPP = 524          # the kernel's internal "not supported", which bpf() passes through
# Kernel functions a trial fentry program attaches to: the first is the kernel's own attach target
# for BPF self-tests (net/bpf/test_run.c, never called outside BPF_PROG_TEST_RUN), the second the
# usual probe target, should the first be configured out.
_FENTRY_TARGETS = ("bpf_fentry_test1", "do_sys_openat2")
# The release that lets BPF trampolines attach to kernel functions, for the message only: x86-64
# has them since 5.5; arm64 since 6.4 (its ftrace direct calls).
TRAMPOLINES_SINCE = {"x86_64": "5.5", "aarch64": "6.4"}


def _errno_text(err: int | None) -> str:
    return f"{os.strerror(err)} ({errno.errorcode.get(err, err)})" if err else "unknown error"


@functools.cache
def tracing_attach() -> tuple[bool, str]:
    """Whether fentry/fexit programs attach to kernel functions here (BPF trampolines): a trial
    program (r0 = 0) loaded for a kernel function and attached for an instant. (True, target) if
    it attached; (False, why) if not. Kernels that load such a program but have no trampoline for
    this architecture refuse the attach with ENOTSUPP (arm64 before 6.4). Where no program can be
    loaded at all (can_probe), they count as present, as helpers do."""
    if not can_probe():
        return True, "not probed (no privileges to load programs)"
    if not kernel_btf():
        return False, "no kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF) to name a target"
    from .links import BPF_RAW_TRACEPOINT_OPEN, btf_target_id
    from .spec import PROG_TYPES

    target = type_id = None
    for name in _FENTRY_TARGETS:
        try:
            target, type_id = name, btf_target_id("fentry", name)
            break
        except KeyError:
            continue
    if type_id is None:
        return False, f"the kernel's BTF has none of {', '.join(_FENTRY_TARGETS)}"
    prog_type, attach_type = PROG_TYPES["fentry"]
    insns = _MOV_R0_0 + _EXIT
    code = ctypes.create_string_buffer(insns, len(insns))
    license = ctypes.create_string_buffer(b"GPL")
    attr = sc.new_attr()
    struct.pack_into("<IIQQ", attr, 0, prog_type, len(insns) // 8, sc.address(code), sc.address(license))
    struct.pack_into("<I", attr, 68, attach_type)
    struct.pack_into("<I", attr, 108, type_id)
    try:
        fd = sc.bpf(sc.BPF_PROG_LOAD, attr, "probe load")
    except SyscallError as e:
        return False, f"this kernel refuses to load an fentry program for {target}: {_errno_text(e.errno)}"
    try:
        attr = sc.new_attr()
        struct.pack_into("<QI", attr, 0, 0, fd)
        try:
            os.close(sc.bpf(BPF_RAW_TRACEPOINT_OPEN, attr, "probe attach"))
        except SyscallError as e:
            since = TRAMPOLINES_SINCE.get(os.uname().machine)
            if e.errno == ENOTSUPP:
                why = f"this kernel has no BPF trampolines for {os.uname().machine}" + (f" ({since}+)" if since else "")
            else:
                why = f"this kernel refuses to attach an fentry program to {target}: {_errno_text(e.errno)}"
            return False, why
    finally:
        os.close(fd)
    return True, f"an fentry program attached to {target}"


def unknown_helper(log: str) -> Helper | None:
    """The helper a verifier log says this kernel lacks, if that is why a load failed."""
    for line in log.splitlines():
        for word in _UNKNOWN_HELPER:
            if word in line:
                digits = line.rsplit("#", 1)[-1].strip().split()[0] if "#" in line else ""
                if digits.isdigit():
                    number = int(digits)
                    return HELPERS_BY_ID.get(number, Helper(f"helper #{number}", number, "?"))
    return None


__all__ = ["Helper", "HELPERS", "can_probe", "helper_available", "map_type_available", "global_data", "perf_event_dynamic_hash",
           "memcg_accounting", "kernel_btf", "tracing_attach", "unknown_helper"]
