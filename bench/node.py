"""Benchmark: Node.js (V8) frames of hotstack against native-only sampling and `node --cpu-prof`, in one run.

    sudo .venv/bin/python bench/node.py [--seconds 8] [--rate 99]
    sudo .venv/bin/python bench/node.py --processes 10 --rate 19 --seconds 30    # the agent's rate, many nodes

The workload (tests/runtimes/node_work.js) runs `optimized` and `parsing` 75/25. Four phases of the same
length, one after the other: the workload alone, under hotstack with JavaScript frames (kernel unwinder,
the default), under hotstack with `--no-node` (the same walk, no V8 hook), under `node --cpu-prof` (V8's
own sampling profiler, 1 ms interval by default). Per phase: the workload's throughput (work units per CPU
second of the workload), and for hotstack its BPF time per sample (run_time_ns of every program it holds,
kernel.bpf_stats_enabled on for the run, divided by the workload's samples: it includes the cheap runs
that drop other processes' samples) and its own CPU (% of a core).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
WORKLOAD = ROOT / "tests" / "runtimes" / "node_work.js"

from procstat import bpf_run_time_ns, start  # noqa: E402

from hotstack.ebpf import enable_run_time_stats  # noqa: E402
from hotstack.profile.model import FrameKind  # noqa: E402
from hotstack.sampling import Engine, EngineConfig  # noqa: E402


def throughput(proc: subprocess.Popen) -> float:
    out = proc.stdout.read().split()
    proc.wait()
    return int(out[out.index("work") + 1]) / float(out[out.index("cpu") + 1])


def run_hotstack(seconds: float, rate: int, node_frames: bool) -> dict:
    proc = start(["node", str(WORKLOAD), str(seconds)])
    config = EngineConfig(frequency=rate, pids=(proc.pid,), runtimes_off=() if node_frames else ("v8",))
    with Engine(config) as engine:
        bpf0, cpu0 = bpf_run_time_ns(os.getpid()), time.process_time()
        profile = engine.run(seconds - 0.5)
        bpf1, cpu1 = bpf_run_time_ns(os.getpid()), time.process_time()
    samples = sum(s.value for s in profile.samples)
    js = sum(s.value for s in profile.samples if any(f.kind is FrameKind.JS for f in s.stack))
    return {"throughput": throughput(proc), "samples": samples, "js_share": 100.0 * js / max(samples, 1),
            "bpf_us_per_sample": (bpf1 - bpf0) / 1e3 / max(samples, 1),
            "cpu_percent": 100.0 * (cpu1 - cpu0) / (seconds - 0.5)}


def run_many(count: int, seconds: float, rate: int, node_frames: bool) -> dict:
    """hotstack's own CPU (% of one core) sampling `count` node workloads, the whole host."""
    procs = [start(["node", str(WORKLOAD), str(seconds + 5)]) for _ in range(count)]
    try:
        config = EngineConfig(frequency=rate, runtimes_off=() if node_frames else ("v8",))
        with Engine(config) as engine:
            cpu0 = time.process_time()
            samples = js = 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(min(5.0, max(0.0, end - time.monotonic())))
                profile = engine.collect()[0]
                samples += sum(s.value for s in profile.samples if s.comm == "node")
                js += sum(s.value for s in profile.samples if any(f.kind is FrameKind.JS for f in s.stack))
            cpu = time.process_time() - cpu0
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return {"cpu_percent": 100.0 * cpu / seconds, "samples": samples, "js": js}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--processes", type=int, default=0, help="N node workloads at once: hotstack's CPU only")
    args = ap.parse_args()
    if args.processes:
        for node_frames in (True, False):
            r = run_many(args.processes, args.seconds, args.rate, node_frames)
            print(f"{args.processes} node processes, {args.rate} Hz, {'JS frames' if node_frames else '--no-node'}: "
                  f"hotstack CPU {r['cpu_percent']:.2f}% of a core, {r['samples']} node samples "
                  f"({r['js']} with JS frames)")
        return
    stats_fd = enable_run_time_stats()
    try:
        alone = throughput(start(["node", str(WORKLOAD), str(args.seconds)]))
        with_js = run_hotstack(args.seconds, args.rate, True)
        native = run_hotstack(args.seconds, args.rate, False)
        with tempfile.TemporaryDirectory() as tmp:
            cpu_prof = throughput(start(["node", "--cpu-prof", f"--cpu-prof-dir={tmp}", str(WORKLOAD),
                                         str(args.seconds)]))
    finally:
        os.close(stats_fd)
    print(f"workload alone: {alone:.0f} work/CPU-s")
    for name, r in (("hotstack, JS frames", with_js), ("hotstack --no-node", native)):
        print(f"{name}: {r['throughput']:.0f} work/CPU-s ({100 * (1 - r['throughput'] / alone):+.1f}% slower), "
              f"{r['samples']} samples ({r['js_share']:.0f}% with JS frames), BPF {r['bpf_us_per_sample']:.1f} us"
              f"/sample, hotstack CPU {r['cpu_percent']:.2f}% of a core")
    print(f"node --cpu-prof: {cpu_prof:.0f} work/CPU-s ({100 * (1 - cpu_prof / alone):+.1f}% slower)")


if __name__ == "__main__":
    main()
