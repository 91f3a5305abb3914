"""Benchmark: Python frames of hotstack against py-spy on the same workload, in one run.

    sudo .venv/bin/python bench/python.py [--python /usr/bin/python3] [--seconds 10] [--rate 99]

The workload (tests/python/workload_abc.py) runs a, b, c (60/30/10%) under one caller. Four phases
of the same length, one after the other: the workload alone, under hotstack with Python frames,
under hotstack without them, under `py-spy record` (PyPI: `pip install py-spy`) at the same rate.
Prints, per phase, the workload's throughput (caller() calls/s) and the profiler's CPU; then the
top-10 Python functions by inclusive share from hotstack and from py-spy, and their differences.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
WORKLOAD = ROOT / "tests" / "python" / "workload_abc.py"

from hotstack.profile.model import FrameKind  # noqa: E402
from hotstack.sampling import Engine, EngineConfig  # noqa: E402


def start_workload(python: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([python, str(WORKLOAD), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def finish(proc: subprocess.Popen, seconds: float) -> tuple[float, float]:
    """(caller() calls per second of the workload's CPU time, the workload's CPU seconds)."""
    out = proc.stdout.read()
    proc.wait()
    fields = out.split("calls", 1)[1].split()
    calls, cpu = int(fields[0]), float(fields[2])
    return calls / cpu, cpu


def shares(stacks: Counter) -> dict[str, float]:
    """Inclusive share (% of samples) per function, from {tuple of function names: count}."""
    total = sum(stacks.values())
    per = Counter()
    for names, n in stacks.items():
        for name in set(names):
            per[name] += n
    return {k: 100.0 * v / total for k, v in per.items()} if total else {}


def run_hotstack(python: str, seconds: float, rate: int, python_enabled: bool):
    proc = start_workload(python, seconds)
    cpu0 = time.process_time()
    config = EngineConfig(frequency=rate, pids=(proc.pid,), runtime_frames=python_enabled)
    with Engine(config) as prof:
        ready = time.process_time() - cpu0
        cpu1 = time.process_time()
        last = prof.run(max(0.5, seconds - 0.5))
        bpf_ns = prof.bpf_run_time_ns()
        cpu = time.process_time() - cpu1
    rate_calls, _cpu = finish(proc, seconds)
    stacks = Counter()
    for s in last.samples if last else []:
        names = tuple(f.name for f in s.stack if f.kind is FrameKind.PYTHON)
        if names:
            stacks[names] += s.value
    total = last.total if last else 0
    return rate_calls, cpu, ready, bpf_ns, stacks, total


def run_pyspy(pyspy: str, python: str, seconds: float, rate: int):
    proc = start_workload(python, seconds)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pyspy.txt"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        spy = subprocess.run([pyspy, "record", "--pid", str(proc.pid), "--rate", str(rate), "--duration",
                              str(int(max(1, seconds - 1))), "--format", "raw", "--output", str(out)],
                             capture_output=True, text=True)
        rate_calls, workload_cpu = finish(proc, seconds)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if spy.returncode != 0:
            raise SystemExit(f"py-spy failed: {spy.stderr.strip()[-300:]}")
        stacks = Counter()
        for line in out.read_text().splitlines():
            folded, _, count = line.rpartition(" ")
            frames = folded.split(";")
            if frames and frames[0].startswith("process "):
                frames = frames[1:]
            names = tuple(f.split(" (", 1)[0] for f in frames)
            stacks[names] += int(count)
    # The workload is a child too: take its own CPU out of py-spy's.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) - workload_cpu
    return rate_calls, max(0.0, cpu), stacks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rate", type=int, default=99)
    args = ap.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(pyspy):
        raise SystemExit("py-spy not found: pip install py-spy")
    T, R = args.seconds, args.rate
    version = subprocess.run([args.python, "-V"], capture_output=True, text=True).stdout.strip()
    print(f"workload: {WORKLOAD.name} on {version}, {T:.0f} s per phase, {R} Hz")

    base, _cpu = finish(start_workload(args.python, T), T)
    hs_calls, hs_cpu, hs_ready, hs_bpf, hs_stacks, hs_total = run_hotstack(args.python, T, R, True)
    nopy_calls, nopy_cpu, _ready, nopy_bpf, _s, _t = run_hotstack(args.python, T, R, False)
    spy_calls, spy_cpu, spy_stacks = run_pyspy(pyspy, args.python, T, R)

    print(f"\nworkload throughput (caller() calls per CPU-second of the workload): alone {base:.0f}")
    for name, calls in (("hotstack, python frames", hs_calls), ("hotstack, no python frames", nopy_calls),
                        ("py-spy record", spy_calls)):
        print(f"  {name:28s} {calls:8.0f}  slowdown {100 * (1 - calls / base):+5.1f}%")
    sampled = T - 0.5
    print("\nprofiler CPU over the sampling time (share of one CPU):")
    print(f"  hotstack, python frames     {100 * hs_cpu / sampled:5.2f}% userspace + "
          f"{100 * hs_bpf / 1e9 / sampled:5.3f}% BPF   (startup {hs_ready:.2f} s CPU, not counted)")
    print(f"  hotstack, no python frames  {100 * nopy_cpu / sampled:5.2f}% userspace + "
          f"{100 * nopy_bpf / 1e9 / sampled:5.3f}% BPF")
    print(f"  py-spy record               {100 * spy_cpu / (T - 1):5.2f}%")
    print("  (BPF time is the sampler program's on every CPU sample of the host, not only the workload's)")

    hs, spy = shares(hs_stacks), shares(spy_stacks)
    top_hs = sorted(hs, key=hs.get, reverse=True)[:10]
    top_spy = sorted(spy, key=spy.get, reverse=True)[:10]
    print(f"\ntop-10 Python functions, inclusive share (hotstack {sum(hs_stacks.values())} samples with Python "
          f"frames of {hs_total}; py-spy {sum(spy_stacks.values())} samples):")
    print(f"  {'function':12s} {'hotstack':>9s} {'py-spy':>9s} {'diff':>7s}")
    worst = 0.0
    for name in top_hs:
        d = hs.get(name, 0) - spy.get(name, 0)
        worst = max(worst, abs(d))
        print(f"  {name:12s} {hs.get(name, 0):8.1f}% {spy.get(name, 0):8.1f}% {d:+6.1f}")
    same = set(top_hs) == set(top_spy)
    print(f"\ntop-10 sets agree: {same}; largest share difference: {worst:.1f} points")
    print("a/b/c as shares of the samples under caller (hotstack): "
          + ", ".join(f"{k} {hs.get(k, 0) / max(1e-9, hs.get('caller', 0)) * 100:.1f}%" for k in "abc"))


if __name__ == "__main__":
    main()
