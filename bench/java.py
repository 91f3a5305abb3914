"""Benchmark: Java (HotSpot) frames of hotstack against native-only sampling and JFR's method sampling, in one run.

    sudo .venv/bin/python bench/java.py [--runs 3] [--seconds 8] [--warmup 3] [--rate 99] [--threads 2]

The workload is tests/runtimes/hotspot/HotWork.java (heavy/light 75/25, heavy inlined by C2 into work),
`--threads` worker threads, a fresh JVM per phase. Four phases of the same length per run, their order
rotated from run to run: the workload alone; under hotstack with Java frames (kernel unwinder, the
default); under hotstack with `--no-java` (the same walk, no HotSpot hook: native frames only); under
JFR's method sampling alone (`jcmd PID JFR.start` with a settings file enabling only
jdk.ExecutionSample, its period 1000/rate ms). Each phase is measured after `--warmup` seconds (JIT
compilation, hotstack's tables of libjvm, JFR's own start), over `--seconds`.

Per phase: the workload's throughput (work() calls per CPU second of its worker threads, from the
workload's own ticks, so a busy machine does not count); for hotstack its BPF time per sample
(run_time_ns of every program it holds, kernel.bpf_stats_enabled on for the run, divided by the
workload's samples: it includes the cheap runs that drop other processes' samples), its own CPU (% of
a core, /proc) and the share of the workload's samples with Java frames; for JFR the CPU of the JVM's
JFR threads and its sample count. Every run is printed, then the medians and the ratio Java frames /
native-only of the BPF time per sample (target: <= 2x).

    sudo .venv/bin/python bench/java.py --same-jvm [--runs 3] [--seconds 5] [--rate 499]

The kernel walk alone, A/B on one JVM: a single HotWork JVM, C2-warm (`--warmup` seconds, at least 5),
sampled by hotstack with Java frames and with `--no-java` in turns (the order alternating per round,
`--runs` rounds of each), a fresh engine per phase filtered to the JVM's pid in the kernel, measured
`--seconds` after a 1 s settle. Per phase: the run time of the sampling programs (the engine's own,
not other programs of this process) over the JVM's samples, and the frames per sample (all, Java).
Every round is printed, then the medians of each side and their ratio.

    sudo .venv/bin/python bench/java.py --same-jvm --ab-object OTHER/profile.bpf.o [--jvm-flag=-Xint]

The same A/B of two builds of the sampling program, both with Java frames: this tree's
profile.bpf.o against OTHER's (e.g. a checkout of the commit before a change), on one JVM, with
the JVM's flags given (`--jvm-flag=-Xint`: interpreted frames only).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
WORKLOAD = ROOT / "tests" / "runtimes" / "hotspot" / "HotWork.java"

from procstat import bpf_run_time_ns, cpu_seconds, median, start, stop, threads_cpu_seconds  # noqa: E402

from hotstack.ebpf import enable_run_time_stats  # noqa: E402
from hotstack.profile.model import FrameKind  # noqa: E402
from hotstack.sampling import Engine, EngineConfig, sampler  # noqa: E402

PHASES = ("alone", "java", "native", "jfr")
LABELS = {"alone": "workload alone", "java": "hotstack, Java frames", "native": "hotstack --no-java",
          "jfr": "JFR method sampling"}

JFC = """<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="bench" description="method sampling only">
  <event name="jdk.ExecutionSample">
    <setting name="enabled">true</setting>
    <setting name="period">%d ms</setting>
  </event>
</configuration>
"""


def jdk(tool: str) -> str:
    home = os.environ.get("JAVA_HOME", "")
    path = str(Path(home) / "bin" / tool) if home else shutil.which(tool)
    if not path or not os.path.exists(path):
        sys.exit(f"bench/java.py: no {tool} (install a JDK, or set JAVA_HOME)")
    return path


class Workload:
    """One JVM running HotWork, its ticks (work() calls, worker CPU ns) read as they come."""

    def __init__(self, classes: Path, seconds: float, threads: int, flags: tuple[str, ...] = ()) -> None:
        self.proc = start([jdk("java"), *flags, "-cp", str(classes), "HotWork", str(seconds), str(threads), "200"])
        self.last = (0, 0)
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "tick" and int(parts[2]) > 0:
                with self._lock:
                    self.last = (int(parts[1]), int(parts[2]))

    def tick(self) -> tuple[int, int]:
        with self._lock:
            return self.last

    def close(self) -> None:
        stop(self.proc)


def throughput(t0: tuple[int, int], t1: tuple[int, int]) -> float:
    return (t1[0] - t0[0]) / max((t1[1] - t0[1]) / 1e9, 1e-9)


def phase(kind: str, classes: Path, args, tmp: Path) -> dict:
    work = Workload(classes, 600, args.threads)     # killed at the end of the phase
    try:
        if kind in ("java", "native"):
            config = EngineConfig(frequency=args.rate, pids=(work.proc.pid,),
                                  runtimes_off=() if kind == "java" else ("hotspot",))
            with Engine(config) as engine:
                time.sleep(args.warmup)
                engine.collect()
                t0, bpf0, cpu0 = work.tick(), bpf_run_time_ns(os.getpid()), cpu_seconds(os.getpid())
                time.sleep(args.seconds)
                profile = engine.collect()[0]
                t1, bpf1, cpu1 = work.tick(), bpf_run_time_ns(os.getpid()), cpu_seconds(os.getpid())
            samples = sum(s.value for s in profile.samples)
            java = sum(s.value for s in profile.samples if any(f.kind is FrameKind.JAVA for f in s.stack))
            depth = sum(s.value * len(s.stack) for s in profile.samples) / max(samples, 1)
            return {"throughput": throughput(t0, t1), "samples": samples, "java_share": 100.0 * java / max(samples, 1),
                    "depth": depth,
                    "bpf_us": (bpf1 - bpf0) / 1e3 / max(samples, 1), "cpu": 100.0 * (cpu1 - cpu0) / args.seconds}
        if kind == "jfr":
            jcmd, pid = jdk("jcmd"), str(work.proc.pid)
            settings = tmp / "sampling.jfc"
            settings.write_text(JFC % max(1, round(1000 / args.rate)))
            time.sleep(args.warmup / 2)
            subprocess.run([jcmd, pid, "JFR.start", "name=bench", f"settings={settings}"], check=True,
                           capture_output=True, timeout=60)
            time.sleep(args.warmup / 2)
            t0, cpu0 = work.tick(), threads_cpu_seconds(work.proc.pid, "JFR")
            time.sleep(args.seconds)
            t1, cpu1 = work.tick(), threads_cpu_seconds(work.proc.pid, "JFR")
            recording = tmp / "bench.jfr"
            subprocess.run([jcmd, pid, "JFR.stop", "name=bench", f"filename={recording}"], check=True,
                           capture_output=True, timeout=60)
            summary = subprocess.run([jdk("jfr"), "summary", str(recording)], capture_output=True, text=True,
                                     check=True, timeout=60).stdout
            recording.unlink()
            samples = next((int(line.split()[1]) for line in summary.splitlines()
                            if line.split()[:1] == ["jdk.ExecutionSample"]), 0)
            return {"throughput": throughput(t0, t1), "samples": samples, "cpu": 100.0 * (cpu1 - cpu0) / args.seconds}
        time.sleep(args.warmup)
        t0 = work.tick()
        time.sleep(args.seconds)
        return {"throughput": throughput(t0, work.tick())}
    finally:
        work.close()


def same_jvm_phase(pid: int, java: bool, args, profile_object: str = "") -> dict:
    """One phase on the JVM: with Java frames or not, with the sampling program of this tree or
    `profile_object`."""
    config = EngineConfig(frequency=args.rate, pids=(pid,), runtimes_off=() if java else ("hotspot",))
    real = sampler.object_path
    if profile_object:
        sampler.object_path = lambda name, machine=None: profile_object if name == "profile" else real(name, machine)
    try:
        with Engine(config) as engine:
            time.sleep(1)
            engine.collect()
            bpf0 = engine.bpf_run_time_ns()
            time.sleep(args.seconds)
            profile = engine.collect()[0]
            bpf1 = engine.bpf_run_time_ns()
    finally:
        sampler.object_path = real
    samples = sum(s.value for s in profile.samples)
    frames = sum(s.value * len(s.stack) for s in profile.samples)
    java_frames = sum(s.value * sum(f.kind is FrameKind.JAVA for f in s.stack) for s in profile.samples)
    return {"bpf_us": (bpf1 - bpf0) / 1e3 / max(samples, 1), "samples": samples,
            "depth": frames / max(samples, 1), "java_depth": java_frames / max(samples, 1)}


def same_jvm(classes: Path, args) -> None:
    work = Workload(classes, 600, args.threads, tuple(args.jvm_flag))
    results: dict[bool, list[dict]] = {True: [], False: []}
    # the two sides: True is this tree with Java frames; False --no-java, or with --ab-object that object
    names = {True: "this tree", False: "ab-object"} if args.ab_object else {True: "Java frames", False: "--no-java"}
    try:
        print(f"one HotWork JVM (pid {work.proc.pid}, flags {args.jvm_flag}), {args.threads} threads, "
              f"{args.rate} Hz, {args.seconds:g} s per phase after a 1 s settle, {max(args.warmup, 5):g} s warm-up, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        time.sleep(max(args.warmup, 5))
        for run in range(args.runs):
            order = (True, False) if run % 2 == 0 else (False, True)
            for side in order:
                if args.ab_object:
                    r = same_jvm_phase(work.proc.pid, True, args, "" if side else args.ab_object)
                else:
                    r = same_jvm_phase(work.proc.pid, side, args)
                results[side].append(r)
                print(f"  round {run + 1} {names[side]:11}: {r['bpf_us']:6.2f} us/sample, "
                      f"{r['samples']:5} samples, {r['depth']:4.1f} frames ({r['java_depth']:4.1f} Java) per sample")
            print(f"  round {run + 1} ratio: {results[True][-1]['bpf_us'] / results[False][-1]['bpf_us']:.2f}x "
                  f"(load average {os.getloadavg()[0]:.1f})")
    finally:
        work.close()
    java = median([r["bpf_us"] for r in results[True]])
    native = median([r["bpf_us"] for r in results[False]])
    rounds = median([j["bpf_us"] / n["bpf_us"] for j, n in zip(results[True], results[False])])
    print(f"medians of {args.runs} rounds: {names[True]} {java:.2f} us/sample, {names[False]} {native:.2f} us/sample, "
          f"ratio {java / native:.2f}x (median of the rounds' ratios {rounds:.2f}x"
          + ("" if args.ab_object else f"; target <= 2x: {'yes' if java / native <= 2 else 'NO'}") + ")")


def line(kind: str, r: dict, alone: float) -> str:
    text = f"  {LABELS[kind]:24}{r['throughput']:9.0f} work/CPU-s ({100 * (r['throughput'] / alone - 1):+5.1f}%)"
    if kind in ("java", "native"):
        text += (f", {r['samples']:5} samples ({r['java_share']:3.0f}% with Java frames, {r['depth']:4.1f} frames "
                 f"deep), BPF {r['bpf_us']:5.2f} "
                 f"us/sample, hotstack CPU {r['cpu']:.2f}% of a core")
    elif kind == "jfr":
        text += f", {r['samples']:5} samples (whole recording), JFR threads' CPU {r['cpu']:.2f}% of a core"
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--same-jvm", action="store_true",
                    help="only the kernel walk: Java frames and --no-java in turns on one JVM")
    ap.add_argument("--ab-object", default="",
                    help="with --same-jvm: this tree's profile.bpf.o against this one, both with Java frames")
    ap.add_argument("--jvm-flag", action="append", default=[], help="a flag of the JVM (repeat: several)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/java.py: run as root (eBPF)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="hotstack-bench-java-"))
    stats_fd = enable_run_time_stats()
    results: dict[str, list[dict]] = {k: [] for k in PHASES}
    try:
        subprocess.run([jdk("javac"), "-d", str(tmp), str(WORKLOAD)], check=True, timeout=120)
        if args.same_jvm:
            same_jvm(tmp, args)
            return 0
        print(f"HotWork, {args.threads} threads, {args.rate} Hz, JFR period {max(1, round(1000 / args.rate))} ms, "
              f"{args.seconds:g} s per phase after {args.warmup:g} s warm-up, {os.cpu_count()} CPUs")
        for run in range(args.runs):
            order = PHASES[run % len(PHASES):] + PHASES[:run % len(PHASES)]
            got = {kind: phase(kind, tmp, args, tmp) for kind in order}
            print(f"run {run + 1} (order: {', '.join(order)}):")
            for kind in PHASES:
                results[kind].append(got[kind])
                print(line(kind, got[kind], got["alone"]["throughput"]))
            print(f"  BPF per sample, Java frames / native-only: {got['java']['bpf_us'] / got['native']['bpf_us']:.2f}x")
    finally:
        os.close(stats_fd)
        shutil.rmtree(tmp, ignore_errors=True)
    alone = median([r["throughput"] for r in results["alone"]])
    print(f"median of {args.runs} runs:")
    for kind in PHASES:
        r = {key: median([x[key] for x in results[kind]]) for key in results[kind][0]}
        r["samples"] = int(r.get("samples", 0))
        print(line(kind, r, alone))
    ratio = median([j["bpf_us"] / n["bpf_us"] for j, n in zip(results["java"], results["native"])])
    print(f"BPF per sample, Java frames / native-only (median of the runs' ratios): {ratio:.2f}x "
          f"(target <= 2x: {'yes' if ratio <= 2 else 'NO'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
