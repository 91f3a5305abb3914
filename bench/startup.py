#!/usr/bin/env python3
"""Start-up of `hotstack run profile_cpu`: wall time until sampling is on, and CPU spent getting there.

Two parts, every run printed:
1. End to end, as a user runs it: `hotstack run profile_cpu --timeout 3 -o none` is started and
   its /proc/PID/fd is polled (every 2 ms) until one perf event per online CPU is open (sampling
   on: the events are opened enabled with the program attached), then its /proc/PID/fdinfo until
   a BPF program's run_cnt is above 0 (the first sample taken; hotstack turns the kernel's BPF
   run-time stats on before attaching).
   CPU = the sum of every thread's run time (/proc/PID/task/*/schedstat, ns) at that instant:
   user and kernel time, the verifier's included (it runs in the bpf() call).
2. Where it goes, in a fresh interpreter per run (the same steps in the order the run takes
   them, each timed alone; CPU = process_time, all threads): the interpreter, hotstack's
   imports up to the engine, the kernel's BTF, BPF program loads (the verifier: every
   Program.load), the rest of Engine.start (maps, perf events, /proc reads), and then
   /proc/kallsyms, which the engine parses in a thread once sampling is on (not part of part 1's
   figures; a tree that parses it during the start, beside the verifier, shows a "kallsyms" line
   near zero, and the start's lines carry it).

Two trees in one session (`--tree NAME=SRC`, repeated: each run runs every tree in turn, its src
directory first on PYTHONPATH): the runs of both alternate, under the same load; the load average
is printed with every run. Each tree has its own unwind-table cache, filled by one unmeasured start
first (a host's state after hotstack's first start).

The trees' bytecode is written first, as `pip install` does (--no-compile removes it: with
PYTHONDONTWRITEBYTECODE set, as in the development sessions, every start then compiles hotstack).

Usage: sudo .venv/bin/python bench/startup.py [--runs 5] [--rate 49] [--tree old=../old/src --tree new=src]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from procstat import compile_bytecode

ROOT = Path(__file__).resolve().parent.parent
HOTSTACK = [sys.executable, "-m", "hotstack"]


def online_cpus() -> int:
    count = 0
    for part in Path("/sys/devices/system/cpu/online").read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


def perf_fds(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]":
                n += 1
        except OSError:
            pass
    return n


def programs_ran(pid: int) -> bool:
    """True once a BPF program of `pid` has run (run_cnt in its fdinfo; hotstack turns the
    kernel's run-time stats on before it attaches): the first sample has been taken."""
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        if "prog_type:" in text:
            for line in text.splitlines():
                if line.startswith("run_cnt:") and int(line.split()[1]) > 0:
                    return True
    return False


def cpu_ns(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


# each tree's own unwind-table cache (set by main): trees whose cache formats differ would else
# remove each other's tables (a save removes the files of older format versions) and build them again
TABLE_CACHES: dict[str | None, str] = {}


def tree_env(src: str | None) -> dict[str, str] | None:
    """The environment that runs hotstack from `src` (None: as installed), with the tree's table cache."""
    env = {**os.environ}
    if src in TABLE_CACHES:
        env["HOTSTACK_UNWIND_CACHE"] = TABLE_CACHES[src]
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(src), os.environ.get("PYTHONPATH")) if p)
    return env


def end_to_end(rate: int, src: str | None = None) -> tuple[float, float, float]:
    """(s to sampling on, CPU-s then, s to the first sample)."""
    cpus = online_cpus()
    t0 = time.perf_counter()
    on: tuple[float, float] | None = None
    proc = subprocess.Popen([*HOTSTACK, "run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "3", "--sample-rate", str(rate), "-o", "none", "--host"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=tree_env(src))
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"hotstack exited before sampling: {proc.stderr.read()[-500:]}")
            try:
                if on is None and perf_fds(proc.pid) >= cpus:
                    on = (time.perf_counter() - t0, cpu_ns(proc.pid) / 1e9)
                if on is not None and programs_ran(proc.pid):
                    return on[0], on[1], time.perf_counter() - t0
            except FileNotFoundError:
                continue
            time.sleep(0.002)
    finally:
        proc.wait(timeout=60)


# -- part 2: in a fresh interpreter ---------------------------------------------------------------
def child(rate: int) -> None:
    phases: list[tuple[str, float, float]] = []
    mark = [time.perf_counter(), time.process_time()]

    def lap(name: str) -> None:
        now = [time.perf_counter(), time.process_time()]
        phases.append((name, now[0] - mark[0], now[1] - mark[1]))
        mark[:] = now

    from hotstack import cli
    cli.build_parser("run")
    from hotstack.gadget import run  # noqa: F401  (what `hotstack run` imports before sampling)
    from hotstack.sampling.engine import Engine
    lap("imports")
    from hotstack.ebpf import Program, kernel_btf
    from hotstack.procs import ProcessTable
    from hotstack.sampling.config import EngineConfig
    from hotstack.symbols.symbolizer import Symbolizer
    processes = ProcessTable()
    symbolizer = Symbolizer(processes)
    mark[:] = [time.perf_counter(), time.process_time()]
    kernel_btf()
    lap("kernel BTF")

    verifier = [0.0, 0.0]
    original = Program.load.__func__

    def timed_load(cls, *args, **kwargs):
        t, c = time.perf_counter(), time.process_time()
        try:
            return original(cls, *args, **kwargs)
        finally:
            verifier[0] += time.perf_counter() - t
            verifier[1] += time.process_time() - c
    Program.load = classmethod(timed_load)
    engine = Engine(EngineConfig(frequency=rate), processes=processes, symbolizer=symbolizer)
    engine.start()
    lap("engine start")
    name, wall, cpu = phases.pop()
    phases.append(("BPF program loads (verifier)", verifier[0], verifier[1]))
    phases.append(("rest of Engine.start", wall - verifier[0], cpu - verifier[1]))
    symbolizer.kernel       # (the engine's thread parses it once sampling is on: this waits for it)
    lap("kallsyms, once sampling is on")
    engine.close()
    print(json.dumps(phases))


def breakdown(rate: int, src: str | None = None) -> list[tuple[str, float, float]]:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = time.perf_counter() - t
    r = subprocess.run([sys.executable, __file__, "--child", "--rate", str(rate)], capture_output=True, text=True,
                       check=True, cwd=ROOT, env=tree_env(src))
    return [("interpreter (python -c pass)", bare, bare)] + [tuple(p) for p in json.loads(r.stdout)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rate", type=int, default=49)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=SRC",
                    help="a tree to measure (its src directory); repeat to alternate trees run by run")
    ap.add_argument("--no-compile", action="store_true",
                    help="remove the trees' bytecode first (with PYTHONDONTWRITEBYTECODE: compiled at every start)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.rate)
    if os.geteuid() != 0:
        raise SystemExit("bench/startup.py: needs root (it loads BPF programs)")
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("installed", None)]
    if not args.no_compile:
        compile_bytecode([str(ROOT / "src")] + [src for _, src in trees if src])
        print("bytecode written first (compileall, as pip install does)")
    else:
        # as a fresh clone runs with PYTHONDONTWRITEBYTECODE set: hotstack's own modules compiled at every start
        for src in [str(ROOT / "src")] + [src for _, src in trees if src]:
            for cache in Path(src).rglob("__pycache__"):
                shutil.rmtree(cache, ignore_errors=True)
        print("no bytecode: hotstack's __pycache__ removed first"
              + (" (PYTHONDONTWRITEBYTECODE is set: every start compiles the sources)"
                 if os.environ.get("PYTHONDONTWRITEBYTECODE") else " (the first start writes it again)"))

    caches = tempfile.mkdtemp(prefix="hotstack-startup-")
    for i, (_name, src) in enumerate(trees):
        TABLE_CACHES[src] = os.path.join(caches, str(i))
        end_to_end(args.rate, src)    # fills the tree's table cache, as on a host after its first start
    try:
        measure(args, trees)
    finally:
        shutil.rmtree(caches, ignore_errors=True)


def measure(args, trees) -> None:
    print(f"1. hotstack run profile_cpu: start to sampling on ({online_cpus()} CPUs, {args.rate} Hz; "
          "each tree's table cache filled by one start first)")
    ends: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in trees}
    for i in range(args.runs):
        for name, src in trees:
            load = os.getloadavg()[0]
            wall, cpu, first = end_to_end(args.rate, src)
            ends[name].append((wall, cpu, first))
            print(f"   {name} run {i + 1}: sampling on after {wall:.3f} s wall, {cpu:.3f} CPU-s; first sample taken by "
                  f"{first:.3f} s (load {load:.1f})", flush=True)
    for name, _ in trees:
        walls, cpus, firsts = zip(*ends[name])
        print(f"   {name} median: sampling on {statistics.median(walls):.3f} s, {statistics.median(cpus):.3f} CPU-s; "
              f"first sample {statistics.median(firsts):.3f} s (target: under 1 s and 0.5 CPU-s)")

    print("2. where it goes (fresh interpreter per run; wall s / CPU s)")
    runs: dict[str, list] = {name: [] for name, _ in trees}
    for i in range(args.runs):
        for name, src in trees:
            load = os.getloadavg()[0]
            phases = breakdown(args.rate, src)
            runs[name].append(phases)
            print(f"   {name} run {i + 1}: " + ", ".join(f"{n} {w:.3f}/{c:.3f}" for n, w, c in phases)
                  + f" (load {load:.1f})", flush=True)
    for name, _ in trees:
        print(f"   {name} median:")
        for j, (phase, _, _) in enumerate(runs[name][0]):
            print(f"     {phase:<32} {statistics.median(r[j][1] for r in runs[name]):7.3f} s "
                  f"{statistics.median(r[j][2] for r in runs[name]):7.3f} CPU-s")


if __name__ == "__main__":
    main()
