"""`hotstack doctor`: what this host offers, what each missing piece disables, and the fix."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import TextIO

from . import ebpf
from .sampling.diagnose import (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, MIN_KERNEL, effective_caps, has_cap,
                                kernel_version, read_sysctl)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    disables: str = ""     # what does not work without it
    fix: str = ""
    required: bool = True  # profiling cannot run without it


def _mounted(fstype: str) -> list[str]:
    try:
        with open("/proc/mounts") as f:
            return [line.split()[1] for line in f if line.split()[2] == fstype]
    except OSError:
        return []


def _kernel_config(option: str) -> str | None:
    """y/m/n for a kernel option, from /proc/config.gz or /boot/config-*; None if unknown."""
    import gzip
    for path in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                for line in f:
                    if line.startswith(option + "="):
                        return line.split("=", 1)[1].strip()
                return "n"
        except OSError:
            continue
    return None


def _try_bpf() -> tuple[bool, str]:
    spec = ebpf.MapSpec("hs_probe", 2, 4, 8, 1)
    try:
        m = ebpf.Map.create(spec)
    except ebpf.SyscallError as e:
        return False, str(e)
    m.close()
    return True, "bpf() works"


def _try_ringbuf() -> tuple[bool, str]:
    try:
        ebpf.Map.create(ebpf.MapSpec("hs_ringbuf", 27, 0, 0, 4096)).close()
        return True, "BPF_MAP_TYPE_RINGBUF available"
    except ebpf.SyscallError as e:
        return False, str(e)


def _try_perf_event() -> tuple[bool, str]:
    attr = ebpf.perf.perf_event_attr(ebpf.perf.PERF_TYPE_SOFTWARE, ebpf.perf.PERF_COUNT_SW_CPU_CLOCK, frequency=19)
    try:
        ebpf.PerfEvent.open(attr, cpu=ebpf.online_cpus()[0]).close()
        return True, "a cpu-clock perf event can be opened"
    except ebpf.SyscallError as e:
        return False, str(e)


def _uprobe_type() -> bool:
    return os.path.exists("/sys/bus/event_source/devices/uprobe/type")


def _kprobes() -> tuple[bool, str]:
    if os.path.exists("/sys/bus/event_source/devices/kprobe/type"):
        return True, "kprobe PMU present"
    config = _kernel_config("CONFIG_KPROBES")
    return False, "CONFIG_KPROBES is not set" if config in ("n", None) else f"CONFIG_KPROBES={config} but no kprobe PMU"


def run_checks() -> list[Check]:
    caps = effective_caps()
    checks: list[Check] = []
    kv = kernel_version()
    checks.append(Check("kernel version", kv >= MIN_KERNEL, os.uname().release,
                        "everything", f"upgrade to Linux {MIN_KERNEL[0]}.{MIN_KERNEL[1]} or newer"))
    priv = has_cap(CAP_SYS_ADMIN, caps) or (has_cap(CAP_BPF, caps) and has_cap(CAP_PERFMON, caps))
    have = [name for name, cap in (("CAP_SYS_ADMIN", CAP_SYS_ADMIN), ("CAP_BPF", CAP_BPF),
                                   ("CAP_PERFMON", CAP_PERFMON)) if has_cap(cap, caps)]
    checks.append(Check("privileges", priv, "effective: " + (", ".join(have) or "none of CAP_BPF, CAP_PERFMON, "
                                                                               "CAP_SYS_ADMIN"),
                        "loading eBPF and opening perf events",
                        "run as root, or grant CAP_BPF+CAP_PERFMON (or CAP_SYS_ADMIN)"))
    ok, detail = _try_bpf()
    checks.append(Check("bpf() syscall", ok, detail, "all sampling",
                        "needs CONFIG_BPF_SYSCALL, privileges above, and no LSM denying bpf()"))
    paranoid = read_sysctl("kernel.perf_event_paranoid")
    ok, detail = _try_perf_event()
    checks.append(Check("perf events", ok, f"{detail} (perf_event_paranoid={paranoid})", "all sampling",
                        "run with CAP_PERFMON or CAP_SYS_ADMIN, or `sysctl kernel.perf_event_paranoid=1`"))
    btf = os.path.exists("/sys/kernel/btf/vmlinux")
    checks.append(Check("kernel BTF", btf, "/sys/kernel/btf/vmlinux" + (" present" if btf else " missing"),
                        "kernel struct offsets (Python frames, fentry probes)", "a kernel built with "
                        "CONFIG_DEBUG_INFO_BTF=y", required=False))
    tracefs = _mounted("tracefs")
    checks.append(Check("tracefs", bool(tracefs), ", ".join(tracefs) or "not mounted",
                        "tracepoint and uprobe links (probe_links, off-CPU)",
                        "mount -t tracefs nodev /sys/kernel/tracing", required=False))
    checks.append(Check("uprobes", _uprobe_type(), "uprobe PMU " + ("present" if _uprobe_type() else "missing"),
                        "uprobe: and uretprobe: probe_links", "a kernel with CONFIG_UPROBE_EVENTS=y", required=False))
    ok, detail = _kprobes()
    checks.append(Check("kprobes", ok, detail, "kprobe:/kretprobe: probe_links (fentry/fexit are used instead "
                        "where BTF allows)", "a kernel with CONFIG_KPROBES=y and CONFIG_KPROBE_EVENTS=y",
                        required=False))
    ok, detail = _try_ringbuf()
    checks.append(Check("ring buffer", ok, detail, "event streams of later features",
                        "Linux 5.8 or newer", required=False))
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    memcg = kv >= (5, 11)
    show = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    checks.append(Check("memlock", memcg or soft == resource.RLIM_INFINITY or soft >= 64 << 20,
                        f"RLIMIT_MEMLOCK={show}" + (" (not used: kernel charges BPF memory to memcg)" if memcg else ""),
                        "creating BPF maps on kernels before 5.11", "ulimit -l unlimited or LimitMEMLOCK=infinity"))
    return checks


def report(out: TextIO) -> int:
    from rich.console import Console
    from rich.table import Table

    checks = run_checks()
    console = Console(file=out, width=None if out.isatty() else 160, no_color=not out.isatty(), highlight=False)
    table = Table(title="hotstack doctor", show_lines=False)
    for col in ("check", "status", "detail", "without it", "fix"):
        table.add_column(col, overflow="fold")
    for c in checks:
        status = "ok" if c.ok else ("MISSING" if c.required else "missing")
        table.add_row(c.name, status, c.detail, "" if c.ok else c.disables, "" if c.ok else c.fix)
    console.print(table)
    blocking = [c.name for c in checks if c.required and not c.ok]
    if blocking:
        console.print(f"profiling cannot run: {', '.join(blocking)}")
        return 2
    console.print("profiling can run on this host")
    return 0


__all__ = ["Check", "run_checks", "report"]
