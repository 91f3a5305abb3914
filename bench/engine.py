#!/usr/bin/env python3
"""Cost of `hotstack run profile_cpu` next to `perf record -F HZ -a -g`, same busy workload, one run.

For each rate (19 and 99 Hz) both profilers sample the whole host while two busy C processes
run, one after the other. Printed per second profiled: CPU seconds of the profiler process
(user+sys from wait4) plus, for hotstack, the kernel time of its BPF program (run_time_ns from
the program's fdinfo; BPF stats are enabled by hotstack); and max RSS.

Each profiler runs twice, for a short and a long duration: "total" is the long run's cost per
second (start-up included), "steady" is the difference between the two runs per extra second,
which is what an always-on agent costs once started. Noisy machine: read the ratios.
`--workload-only` samples only the two busy processes (`--pid`, `perf record -p`): the engine's own
cost without what else runs on the host (whose binaries a whole-host run symbolizes too).
Usage: sudo .venv/bin/python bench/engine.py [--seconds 20] [--short 5] [--workload-only]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "tests" / "engine" / "workloads" / "hot_ab.c"


def bpf_run_time_ns(pid: int) -> int:
    total = 0
    for path in glob.glob(f"/proc/{pid}/fdinfo/*"):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        if "prog_type:" in text:
            for line in text.splitlines():
                if line.startswith("run_time_ns:"):
                    total += int(line.split()[1])
    return total


def measure(argv: list[str], seconds: float, watch_bpf: bool) -> dict:
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    last_bpf = [0]
    done = threading.Event()

    def poll_bpf() -> None:
        while not done.wait(0.25):
            value = bpf_run_time_ns(proc.pid)
            if value:
                last_bpf[0] = value

    watcher = threading.Thread(target=poll_bpf, daemon=True)
    if watch_bpf:
        watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    wall = time.monotonic() - start
    if status != 0:
        raise SystemExit(f"{argv[0]} failed: {proc.stderr.read().decode()[-500:]}")
    cpu = usage.ru_utime + usage.ru_stime
    bpf = last_bpf[0] / 1e9
    return {"cpu_per_s": cpu / seconds, "bpf_per_s": bpf / seconds, "total_per_s": (cpu + bpf) / seconds,
            "rss_mb": usage.ru_maxrss / 1024, "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--short", type=float, default=5)
    ap.add_argument("--workload-only", action="store_true", help="sample only the two busy processes")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root")
    perf = shutil.which("perf")
    tmp = Path(tempfile.mkdtemp(prefix="hotstack-bench-"))
    binary = tmp / "hot_ab"
    subprocess.run(["cc", "-O2", "-fno-omit-frame-pointer", str(WORKLOAD), "-o", str(binary)], check=True)
    busy = [subprocess.Popen([str(binary)]) for _ in range(2)]
    pids = [str(b.pid) for b in busy]
    ours = [a for pid in pids for a in ("--pid", pid)] if args.workload_only else []
    theirs = ["-p", ",".join(pids)] if args.workload_only else ["-a"]
    rows = []
    try:
        for hz in (19, 99):
            commands = {"hotstack": lambda d: [sys.executable, "-m", "hotstack", "run", "profile_cpu", "--map-fetch-interval", "0", "--timeout",
                                               str(d), "--sample-rate", str(hz), "-o", "folded", "--host", *ours]}
            if perf:
                commands["perf record -g"] = lambda d: [perf, "record", "-q", "-F", str(hz), *theirs, "-g", "-o",
                                                        str(tmp / "perf.data"), "--", "sleep", str(d)]
            for name, argv in commands.items():
                bpf = name == "hotstack"
                short = measure(argv(args.short), args.short, watch_bpf=bpf)
                long = measure(argv(args.seconds), args.seconds, watch_bpf=bpf)
                steady = (long["total_per_s"] * args.seconds - short["total_per_s"] * args.short) / (
                    args.seconds - args.short)
                rows.append((name, hz, long, max(steady, 0.0)))
    finally:
        for b in busy:
            b.kill()
            b.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{args.seconds:.0f} s runs (steady state from {args.short:.0f} s runs), 2 busy processes, "
          f"{os.cpu_count()} CPUs, {'the 2 processes only' if args.workload_only else 'whole host'}")
    print("| profiler | Hz | CPU s/s (process) | BPF s/s | total s/s | steady s/s | max RSS MB | total vs perf "
          "| steady vs perf |")
    print("|---|---|---|---|---|---|---|---|---|")
    perf_rows = {hz: (r["total_per_s"], steady) for name, hz, r, steady in rows if name.startswith("perf")}
    for name, hz, r, steady in rows:
        base = perf_rows.get(hz)
        total_ratio = f"{r['total_per_s'] / base[0]:.2f}x" if base and base[0] else "-"
        steady_ratio = f"{steady / base[1]:.2f}x" if base and base[1] else "-"
        print(f"| {name} | {hz} | {r['cpu_per_s']:.4f} | {r['bpf_per_s']:.5f} | {r['total_per_s']:.4f} | "
              f"{steady:.4f} | {r['rss_mb']:.0f} | {total_ratio} | {steady_ratio} |")


if __name__ == "__main__":
    main()
