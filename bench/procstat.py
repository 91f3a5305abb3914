"""What the runtime benchmarks (bench/node.py, bench/java.py, bench/agent.py) read of processes: CPU time and
RSS from /proc, the BPF run time of the programs a process holds, and a workload started until it says
"ready"; and the trees' bytecode written before a benchmark starts them. Helpers only: no benchmark here.
"""

from __future__ import annotations

import glob
import os
import statistics
import subprocess
import sys
from pathlib import Path


def compile_bytecode(srcs) -> None:
    """Writes the bytecode of each tree's modules, as `pip install` does: where
    PYTHONDONTWRITEBYTECODE is set (this workplace sets it) an editable tree is otherwise compiled
    from source at every start (~0.1 CPU-s and ~2.5 MB of peak RSS that no installed hotstack pays)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for src in srcs:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, env=env,
                       stdout=subprocess.DEVNULL)


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
