#!/usr/bin/env python3
"""BPF cost of the CPU sampler: time per sample in the kernel, and what the verifier spends on each
program at load, for this tree and (optionally) another checkout of hotstack, alternating, every run
printed.

Workloads (each sampled alone, by pid, at --rate Hz on every CPU):
  python3   Debian's python3 in a ~45-frame Python recursion over sorted() (tests/unwind/workloads/
            recursion.py): the CPython walker (bpf/python.h) and the native walk below it
  python3-native   the same process with Python frames off: the native walk alone
  shallow   a C program built with frame pointers, 5 frames deep (tests/engine/workloads/hot_ab.c): the
            fixed cost of a sample (the kernel stack, the lookups, one step program, the count)
  deep      a C program 300 calls deep, -fomit-frame-pointer (tests/unwind/workloads/deep.c): the
            step programs chained by tail calls up to 128 frames
  java      a JVM with 2 busy threads (tests/runtimes/hotspot/HotWork.java), Java frames on: the step
            program with the runtime hooks (profile_native_step_jit, bpf/hotspot.h), and its
            verification at load (not in the default list: it needs a JDK)
  java-int  the same JVM interpreted (-Xint): interpreted frames only, each recorded with its bytecode
            pointer (the leaf's from its register: its line)

Per run: BPF time per sample of the workload: profile_cpu's run time (the kernel's BPF stats;
tail-called programs run inside their caller's accounting, so this is the whole walk) over the
workload's samples. Every CPU's events run the program; other processes' are filtered out at once
(~0.3 us each) and their time is included, so compare trees on one workload. Per program also the instructions the verifier processed (bpf_prog_info.verified_insns) and
the CPU seconds its load took.

    sudo .venv/bin/python bench/bpf_cost.py [--runs 3] [--seconds 6] [--rate 99] [--tree OTHER_CHECKOUT]

`--tree` runs the same measurement with another checkout's `src/` (e.g. `git worktree add
/tmp/before HEAD~3`), in a fresh interpreter per run, old and new alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from child import run_json_child

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ("python3", "python3-native", "shallow", "deep")

# The child: runs inside the tree under test (PYTHONPATH=<tree>/src), prints one JSON line.
CHILD = r"""
import ctypes, json, struct, subprocess, sys, time
from hotstack.ebpf import enable_run_time_stats, collection as C
from hotstack.ebpf import syscalls as sc
from hotstack.sampling import Engine, EngineConfig

workload, argv, seconds, rate = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
load_cpu = {}
original = C._load_program
def timed(*a, **k):
    t0 = time.process_time()
    p = original(*a, **k)
    load_cpu[p.name] = time.process_time() - t0
    return p
C._load_program = timed

def verified(p):
    info = ctypes.create_string_buffer(256)
    attr = sc.new_attr()
    struct.pack_into("<IIQ", attr, 0, p.fd, len(info), sc.address(info))
    sc.bpf(sc.BPF_OBJ_GET_INFO_BY_FD, attr, "info")
    return struct.unpack_from("<I", info, 216)[0]      # bpf_prog_info.verified_insns (5.16+)

w = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
stats_fd = enable_run_time_stats()
try:
    time.sleep(1.0)
    engine = Engine(EngineConfig(frequency=rate, pids=(w.pid,), unwind="kernel",
                                 runtime_frames=workload in ("python3", "java")))
    with engine:
        time.sleep(2.0)
        engine.collect()
        entry = engine.cpu.collection.programs["profile_cpu"]
        s0 = entry.stats()
        time.sleep(seconds)
        s1 = entry.stats()
        prof = engine.collect()[0]
        programs = {n: verified(p) for n, p in engine.cpu.collection.programs.items() if p.fd >= 0}
    runs = s1.run_count - s0.run_count
    mine = sum(s.value for s in prof.samples if s.pid == w.pid)
    print(json.dumps({"ns": (s1.run_time_ns - s0.run_time_ns) / max(runs, 1), "events": runs, "samples": mine,
                      "verified": programs, "load_cpu": load_cpu}))
finally:
    import os
    os.close(stats_fd)
    w.kill()
"""


def workload_argv(name: str, build: Path) -> list[str]:
    if name.startswith("python3"):
        return ["/usr/bin/python3", str(ROOT / "tests/unwind/workloads/recursion.py"), "40"]
    if name == "shallow":
        exe = build / "hot_ab"
        if not exe.exists():
            subprocess.run(["cc", "-O2", "-fno-omit-frame-pointer", str(ROOT / "tests/engine/workloads/hot_ab.c"),
                            "-o", str(exe)], check=True)
        return [str(exe)]
    if name.startswith("java"):
        if not (build / "HotWork.class").exists():
            subprocess.run(["javac", "-d", str(build), str(ROOT / "tests/runtimes/hotspot/HotWork.java")], check=True)
        return ["java", *(["-Xint"] if name == "java-int" else []), "-cp", str(build), "HotWork", "120", "2"]
    exe = build / "deep"
    if not exe.exists():
        subprocess.run(["cc", "-O1", "-fomit-frame-pointer", str(ROOT / "tests/unwind/workloads/deep.c"), "-o",
                        str(exe)], check=True)
    return [str(exe), "300"]


def run_child(tree: Path, workload: str, argv: list[str], seconds: float, rate: int) -> dict:
    return run_json_child(CHILD, [workload, json.dumps(argv), str(seconds), str(rate)], tree / "src", tree, "bpf_cost.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--tree", type=Path, help="another checkout of hotstack to compare with (its src/)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bpf_cost.py: run as root", file=sys.stderr)
        return 2
    trees = [("this", ROOT)] + ([("other", args.tree.resolve())] if args.tree else [])
    results: dict[tuple[str, str], list[dict]] = {}
    print(f"{os.cpu_count()} CPUs, {args.rate} Hz, {args.seconds:.0f} s per run, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as d:
        for name in args.workloads.split(","):
            argv = workload_argv(name, Path(d))
            for run in range(args.runs):
                order = trees if run % 2 == 0 else list(reversed(trees))
                for label, tree in order:
                    r = run_child(tree, name, argv, args.seconds, args.rate)
                    results.setdefault((name, label), []).append(r)
                    walkers = {k: v for k, v in r["verified"].items() if k.startswith("profile_")}
                    r["us"] = r["ns"] * r["events"] / max(r["samples"], 1) / 1e3
                    print(f"{name:<15} {label:<5} run {run}: {r['us']:6.2f} us BPF per sample "
                          f"({r['samples']} of {r['events']} events the workload's); verified: "
                          + ", ".join(f"{k} {v} ({r['load_cpu'].get(k, 0):.2f} CPU-s)" for k, v in walkers.items()),
                          flush=True)
    print("\nmedians of BPF us per sample of the workload")
    for name in args.workloads.split(","):
        line = f"{name:<15}"
        meds = {}
        for label, _ in trees:
            rs = results.get((name, label), [])
            if rs:
                meds[label] = statistics.median(r["us"] for r in rs)
                line += f"  {label} {meds[label]:6.2f} us"
        if len(meds) == 2 and meds["other"]:
            line += f"  this/other {meds['this'] / meds['other']:.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
