#!/usr/bin/env python3
"""Cost of hotstack's user-stack unwinding modes on a mixed load, next to `perf record -g`.

Mixed load on all CPUs: Debian's python3 in a recursion, a shell loop of short `xz -9` runs,
and a frame-pointer C program (tests/engine/workloads/hot_ab.c). For 19 and 99 Hz, whole host:
  hotstack --unwind fp      frame pointers in the kernel (incomplete stacks for python3 and xz)
  hotstack --unwind kernel  every stack unwound in the kernel with .eh_frame tables in BPF maps
                            (the default)
  perf record -g            frame pointers
hotstack samples only the load's processes (`--comm`, filtered in the kernel; the machine is shared);
perf records the whole host. CPU of the profiler process plus the kernel time of its BPF programs (bench/engine.py's
measure: fdinfo run_time_ns, BPF stats on), per second profiled: "total" is a long run, start-up
included; "steady" the difference between a long and a short run per extra second. Max RSS.
A first `--unwind kernel` run fills the on-disk table cache (as on any host after the first
start); the measured runs find the tables there.

Usage: sudo .venv/bin/python bench/unwind_modes.py [--seconds 20] [--short 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import measure  # noqa: E402



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--short", type=float, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root")
    tmp = Path(tempfile.mkdtemp(prefix="hotstack-bench-"))
    env = {**os.environ, "HOTSTACK_UNWIND_CACHE": str(tmp / "cache")}
    os.environ.update(env)
    subprocess.run(["cc", "-O2", "-fno-omit-frame-pointer", str(ROOT / "tests/engine/workloads/hot_ab.c"), "-o",
                    str(tmp / "hot_ab")], check=True)
    (tmp / "data").write_bytes(os.urandom(1 << 19) * 2)
    load = [subprocess.Popen(["/usr/bin/python3", str(ROOT / "tests/unwind/workloads/recursion.py")]),
            subprocess.Popen(["sh", "-c", f"while :; do xz -9 -c {tmp / 'data'} > /dev/null; done"]),
            subprocess.Popen([str(tmp / "hot_ab")])]
    perf = shutil.which("perf")
    rows = []
    try:
        # only the mixed load (--comm, filtered in the kernel): other sessions share this machine and
        # would make the comparison one of symbolizing their processes
        comms = ["--comm", "python3", "--comm", "xz", "--comm", "hot_ab"]

        def hotstack(mode, hz):
            return lambda d: [sys.executable, "-m", "hotstack", "run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", str(d),
                              "--sample-rate", str(hz), "--unwind", mode, "-o", "folded", "--host", *comms]
        measure(hotstack("kernel", 99)(3), 3, watch_bpf=False)       # fills the table cache
        for hz in (19, 99):
            commands = {"hotstack --unwind fp": hotstack("fp", hz),
                        "hotstack --unwind kernel": hotstack("kernel", hz)}
            if perf:
                commands["perf record -g"] = lambda d, hz=hz: [perf, "record", "-q", "-F", str(hz), "-a", "-g", "-o",
                                                               str(tmp / "perf.data"), "--", "sleep", str(d)]
            for name, argv in commands.items():
                bpf = name.startswith("hotstack")
                short = measure(argv(args.short), args.short, watch_bpf=bpf)
                long = measure(argv(args.seconds), args.seconds, watch_bpf=bpf)
                steady = (long["total_per_s"] * args.seconds - short["total_per_s"] * args.short) / (
                    args.seconds - args.short)
                startup = max(short["total_per_s"] * args.short - steady * args.short, 0.0)
                rows.append((name, hz, long, max(steady, 0.0), startup))
                print(name, hz, "done", flush=True)
    finally:
        for p in load:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.seconds:.0f} s runs (steady state from {args.short:.0f} s runs), mixed load, {os.cpu_count()} CPUs")
    print("| profiler | Hz | CPU s/s (process) | BPF s/s | total s/s | steady s/s | start-up CPU s | max RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, hz, r, steady, startup in rows:
        print(f"| {name} | {hz} | {r['cpu_per_s']:.4f} | {r['bpf_per_s']:.5f} | {r['total_per_s']:.4f} | "
              f"{steady:.4f} | {startup:.2f} | {r['rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
