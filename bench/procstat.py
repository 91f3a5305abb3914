"""What the runtime benchmarks (bench/node.py, bench/java.py, bench/agent.py) read of processes: CPU time and
RSS from /proc, the BPF run time of the programs a process holds, and a workload started until it says
"ready". Helpers only: no benchmark here.
"""

from __future__ import annotations

import glob
import os
import statistics
import subprocess
from pathlib import Path


def bpf_run_time_ns(pid: int) -> int:
    """run_time_ns summed over the BPF programs whose fds `pid` holds (counted while
    kernel.bpf_stats_enabled is on: hotstack.ebpf.enable_run_time_stats)."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/fdinfo/*"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if "prog_type:" in text:
            total += sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("run_time_ns:"))
    return total


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu_seconds(pid: int, comm_prefix: str) -> float:
    """utime + stime of the threads of `pid` whose name starts with `comm_prefix` (a runtime's own
    threads, such as JFR's), in seconds."""
    total = 0.0
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            if not Path(task, "comm").read_text().startswith(comm_prefix):
                continue
            fields = Path(task, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) in MB."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def start(argv: list[str]) -> subprocess.Popen:
    """A workload that prints "ready" once it works (its stdout stays a pipe for what follows)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{argv[0]}: expected 'ready', got {line!r}")
    return proc


def stop(proc: subprocess.Popen) -> None:
    """Kill a workload (by its pid) and reap it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


__all__ = ["bpf_run_time_ns", "cpu_seconds", "threads_cpu_seconds", "rss_mb", "start", "stop", "median",
           "load_average"]
