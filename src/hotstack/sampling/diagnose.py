"""Turn loader failures into one-line messages that say what to do."""

from __future__ import annotations

import errno
import os
import resource

from .. import ebpf
from .. import procs
from ..errors import HotstackError, PrivilegeError

CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
MIN_KERNEL = (5, 2)   # BPF global data (.rodata constants) and MAP_FREEZE


def effective_caps() -> int:
    caps = procs.own_status("CapEff")
    try:
        return int(caps, 16) if caps else 0
    except ValueError:
        return 0


def has_cap(cap: int, caps: int | None = None) -> bool:
    return bool((effective_caps() if caps is None else caps) >> cap & 1)


def can_profile_caps(caps: int | None = None) -> bool:
    caps = effective_caps() if caps is None else caps
    return has_cap(CAP_SYS_ADMIN, caps) or (has_cap(CAP_BPF, caps) and has_cap(CAP_PERFMON, caps))


def kernel_version(release: str | None = None) -> tuple[int, int]:
    release = os.uname().release if release is None else release
    try:
        major, minor = release.split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def read_sysctl(name: str) -> str:
    value = procs.sysctl(name)
    return "?" if value is None else value


PRIVILEGES_HINT = ("run as root (sudo), or grant CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), "
                   "e.g. `sudo setcap cap_bpf,cap_perfmon+ep` on the interpreter or `--privileged` in a container")


def check_preconditions(version_check: bool = True, release: str | None = None) -> None:
    """Fail fast, before loading anything, on what we can know up front. Without the version
    check (a vendor kernel that backports BPF global data under an old number) the loader's
    own error says what is missing instead."""
    release = os.uname().release if release is None else release
    if version_check and kernel_version(release) < MIN_KERNEL:
        raise HotstackError(f"kernel {release} is too old: hotstack needs Linux "
                            f"{MIN_KERNEL[0]}.{MIN_KERNEL[1]}+ for BPF global data (.rodata)")
    if not can_profile_caps():
        raise PrivilegeError(f"missing privileges to load eBPF programs: {PRIVILEGES_HINT}")


def explain(exc: BaseException) -> HotstackError:
    """A HotstackError for a loader failure."""
    if isinstance(exc, HotstackError):
        return exc
    if isinstance(exc, ebpf.VerifierError):
        return HotstackError(f"the kernel verifier rejected the sampler program; last verifier lines:\n{exc.log_tail()}")
    err = getattr(exc, "errno", 0)
    text = str(exc)
    if isinstance(exc, ebpf.SyscallError) and text.startswith("perf_event_open"):
        if err in (errno.EACCES, errno.EPERM):
            return PrivilegeError(
                f"perf events not permitted (kernel.perf_event_paranoid={read_sysctl('kernel.perf_event_paranoid')}):"
                f" {PRIVILEGES_HINT}")
        if err in (errno.ENOENT, errno.ENODEV, errno.EOPNOTSUPP):
            return HotstackError("this kernel offers no software cpu-clock perf event (CONFIG_PERF_EVENTS)")
        return HotstackError(f"cannot open perf events: {text}")
    if err == errno.ENOSYS:
        return HotstackError("this kernel has no bpf() system call (CONFIG_BPF_SYSCALL is off)")
    if err in (errno.EPERM, errno.EACCES):
        if not can_profile_caps():
            return PrivilegeError(f"missing privileges to load eBPF programs: {PRIVILEGES_HINT}")
        if read_sysctl("kernel.unprivileged_bpf_disabled") not in ("0", "?") and os.geteuid() != 0:
            return PrivilegeError("bpf() is disabled for this user (kernel.unprivileged_bpf_disabled): run as root")
        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        if kernel_version() < (5, 11) and soft != resource.RLIM_INFINITY:
            return PrivilegeError(
                f"memlock limit too low for BPF maps ({soft // 1024} KiB; kernels before 5.11 charge BPF maps to "
                f"it): raise it with `ulimit -l unlimited`, LimitMEMLOCK=infinity (systemd) or CAP_SYS_RESOURCE")
        return PrivilegeError(f"the kernel refused to load eBPF ({text}): check LSMs (SELinux, AppArmor, lockdown)")
    return HotstackError(f"cannot start eBPF sampling: {text}")
