"""`hotstack doctor`: what this host offers, what each missing piece disables, and the fix."""

from __future__ import annotations

import os
import sys
import resource
from dataclasses import dataclass
from typing import TextIO

from . import ebpf
from . import procs
from .ebpf import features
from .sampling.diagnose import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, effective_caps, has_cap, read_sysctl
from .text import console as text_console

CAP_SYS_RESOURCE = 24


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    disables: str = ""     # what does not work without it
    fix: str = ""
    required: bool = True  # profiling cannot run without it


def _mounted(fstype: str) -> list[str]:
    return [point for point, kind in procs.mounts() if kind == fstype]


def _kernel_config(option: str) -> str | None:
    """y/m/n for a kernel option, from /proc/config.gz or /boot/config-*; None if unknown."""
    import gzip
    for path in (procs.KERNEL_CONFIG, f"/boot/config-{os.uname().release}"):
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


# The oldest kernel whose BPF offers everything the required checks below probe for (the ring
# buffer, 5.8, is the newest of them); the kernel matrix (tests/kernels) runs from 5.10 up.
MINIMUM = "Linux 5.8"
TESTED = "5.10, 6.1, 6.12 and 6.18"


def _helper_line(name: str) -> str:
    h = features.HELPERS[name]
    return f"{name} ({h.since}+)"


def features_off() -> list[str]:
    """One line per feature this kernel cannot run, with the reason and the release that brings it."""
    lines = []
    if not features.kernel_btf():
        lines.append("Python frames off: this kernel has no BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF) "
                     "to find a thread's TLS base")
        lines.append("off-CPU profiling off: this kernel has no BTF for the tp_btf/sched_switch program "
                     "(CONFIG_DEBUG_INFO_BTF)")
    missing = [n for n in ("bpf_get_current_task_btf", "bpf_task_pt_regs")
               if features.can_probe() and not features.helper_available(n)]
    if missing:
        lines.append("user registers of samples taken in kernel mode and of off-CPU waits found at the top "
                     "of the task's kernel stack: this kernel lacks " + " and ".join(_helper_line(n) for n in missing))
    if not _uprobe_type():
        lines.append("uprobe:/uretprobe: probe links off: this kernel has no uprobe PMU (CONFIG_UPROBE_EVENTS)")
    ok, detail = _kprobes()
    if not ok:
        lines.append(f"kprobe:/kretprobe: probe links off: {detail}")
    if features.kernel_btf():
        tracing, why = features.tracing_attach()
        if not tracing:
            lines.append(f"fentry/fexit off: {why}; kprobe:/kretprobe: probe links " +
                         ("use kprobes" if ok else "have no other way"))
    return lines


def run_checks() -> list[Check]:
    caps = effective_caps()
    checks: list[Check] = []
    checks.append(Check("kernel", True, os.uname().release, required=False))
    machine = os.uname().machine
    try:
        from .bpf import object_suffix
        objects = f"BPF objects: profile{object_suffix(machine)}.bpf.o and its siblings"
        built = True
    except RuntimeError as e:
        objects, built = str(e), False
    checks.append(Check("machine", built, f"{machine} ({objects})", "all sampling",
                        "run on x86_64 or aarch64 (arm64)"))
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
    if ok:
        checks.append(Check("BPF global data", features.global_data(), "read-only .rodata maps, frozen",
                            "all sampling (tunables live in .rodata)", "Linux 5.2 or newer"))
        checks.append(Check("bpf_probe_read_user", features.helper_available("bpf_probe_read_user"),
                            "helper of perf_event programs", "all sampling (user stacks, Python frames)",
                            "Linux 5.5 or newer"))
    paranoid = read_sysctl("kernel.perf_event_paranoid")
    ok, detail = _try_perf_event()
    checks.append(Check("perf events", ok, f"{detail} (perf_event_paranoid={paranoid})", "all sampling",
                        "run with CAP_PERFMON or CAP_SYS_ADMIN, or `sysctl kernel.perf_event_paranoid=1`"))
    ok, detail = _try_ringbuf()
    checks.append(Check("ring buffer", ok, detail, "all sampling (the sampler's stack-copy stream)",
                        "Linux 5.8 or newer"))
    btf = features.kernel_btf()
    checks.append(Check("kernel BTF", btf, "/sys/kernel/btf/vmlinux" + (" present" if btf else " missing"),
                        "Python frames, off-CPU (tp_btf), fentry probes", "a kernel built with "
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
    if btf:
        tracing, why = features.tracing_attach()
        checks.append(Check("fentry/fexit", tracing, why, "kprobe:/kretprobe: probe_links where kprobes are off",
                            "a kernel with BPF trampolines for this machine (x86-64: 5.5+, arm64: 6.4+)",
                            required=False))
    if features.can_probe():
        names = ("bpf_get_current_task_btf", "bpf_task_pt_regs", "bpf_loop", "bpf_find_vma")
        missing = [n for n in names if not features.helper_available(n)]
        checks.append(Check("BPF helpers", not missing, "all of " + ", ".join(names) if not missing else
                            "missing: " + ", ".join(_helper_line(n) for n in missing),
                            "see the lines below the table", "a newer kernel", required=False))
        dynamic = features.perf_event_dynamic_hash()
        checks.append(Check("hash maps in perf_event programs", True, "allocated on demand" if dynamic else
                            "preallocated by the loader (this kernel refuses BPF_F_NO_PREALLOC there; 6.1 "
                            "lifted that)", required=False))
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    memcg = features.memcg_accounting()
    show = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    raisable = os.geteuid() == 0 or has_cap(CAP_SYS_RESOURCE, caps)
    if memcg:
        detail = f"RLIMIT_MEMLOCK={show} (not used: the kernel charges BPF memory to memory cgroups)"
    elif soft == resource.RLIM_INFINITY:
        detail = f"RLIMIT_MEMLOCK={show}"
    else:
        detail = f"RLIMIT_MEMLOCK={show}; this kernel charges BPF maps to it" + (
            ": hotstack raises it by what its maps need" if raisable else " and it cannot be raised here")
    checks.append(Check("memlock", memcg or soft == resource.RLIM_INFINITY or raisable or soft >= 64 << 20,
                        detail, "creating BPF maps (kernels before 5.11)",
                        "run as root, or `ulimit -l unlimited`, or LimitMEMLOCK=infinity"))
    return checks


def report(out: TextIO) -> int:
    from rich.table import Table

    checks = run_checks()
    console = text_console(out, width=None if out.isatty() else 160, no_color=not out.isatty(), highlight=False)
    table = Table(title="hotstack doctor", show_lines=False)
    for col in ("check", "status", "detail", "without it", "fix"):
        table.add_column(col, overflow="fold")
    for c in checks:
        status = "ok" if c.ok else ("MISSING" if c.required else "missing")
        table.add_row(c.name, status, c.detail, "" if c.ok else c.disables, "" if c.ok else c.fix)
    console.print(table)
    console.print(f"hotstack needs {MINIMUM}+ (tested on {TESTED}); it decides from the probes above, "
                  f"not from the kernel version")
    for line in features_off():
        console.print(line)
    blocking = [c.name for c in checks if c.required and not c.ok]
    if blocking:
        console.print(f"profiling cannot run: {', '.join(blocking)}")
        return 2
    console.print("profiling can run on this host")
    return 0


def main(args, out: TextIO) -> int:
    """`hotstack doctor`: the host's checks, or with --pid what is read of one process."""
    if args.record is not None:
        return record_process(args.pid, args.record, out)
    if args.pid is not None:
        return report_process(args.pid, out)
    return report(out)


def record_process(pid: int | None, directory: str, out: TextIO) -> int:
    """`hotstack doctor --pid PID --record DIR`: the process recorded into DIR (procs.record), to
    be read back with procs.RecordedProcess. Exit 2 without a process, or where DIR cannot be written."""
    from . import procs

    if pid is None or pid <= 0:
        print("hotstack doctor: --record needs --pid PID", file=sys.stderr)
        return 2
    try:
        written = procs.record(pid, directory)
    except ProcessLookupError:
        print(f"hotstack doctor: no process {pid}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"hotstack doctor: cannot record into {directory!r}: {e.strerror or e}", file=sys.stderr)
        return 2
    recorded = procs.RecordedProcess(written)
    out.write(f"process {pid} recorded into {str(written)!r}: {len(recorded.facts['memory'])} memory regions, "
              f"{len(recorded.facts['files'])} files\n")
    return 0


def report_process(pid: int, out: TextIO) -> int:
    """What hotstack reads of process `pid`: which runtime it runs, and whether its frames are read
    (with the reason and version where not). Exit 2 if there is no such process."""
    from . import procs
    from .runtimes.common.files import UNREAD
    from .runtimes.registry import frame_sources

    info = procs.read_process(pid) if pid > 0 else None
    if info is None:
        print(f"hotstack doctor: no process {pid}", file=sys.stderr)
        return 2
    write = out.write
    write(f"process {pid}: {info.comm!r}, executable {procs.exe_path(pid)!r}\n")
    write(f"  container: {info.container_id or 'none'}; own root: {'no' if info.root_is_host else 'yes'}\n")
    found = []
    for source in frame_sources():
        try:
            if source.detect(info.process):
                found.append(source.label)
        except Exception as e:     # a source's failure is what doctor is asked about: say it
            write(f"  {source.name}: could not be looked at ({type(e).__name__}: {e})\n")
    unread = UNREAD.of(pid)
    for name in found:
        write(f"  runtime {name}: read (its frames are named)\n")
    for u in unread:
        version = f" {u.version}" if u.version else ""
        if u.partial:
            write(f"  runtime {u.runtime}{version} in {u.file!r}: read without {u.partial}: {u.reason}\n")
        else:
            write(f"  runtime {u.runtime}{version} in {u.file!r}: NOT read: {u.reason}\n")
    if not found and not unread:
        write("  no language runtime recognized: native frames only (C, C++, Go, Rust ...)\n")
    return 0


__all__ = ["Check", "MINIMUM", "features_off", "main", "record_process", "report", "report_process", "run_checks"]
