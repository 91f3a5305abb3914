"""The kernel unwinder (bpf/native_unwind.h) alone: completeness against `perf record --call-graph
dwarf`, BPF time per sample, the sampler's own CPU, table build time and kernel map memory.

Workloads (one after the other, each sampled by both at the same frequency):
  callback  a C chain main > a > qsort (libc) > compare > b > c built -O2 -fomit-frame-pointer
  libcleaf  a C program built with frame pointers whose hot leaf is memcpy in libc (7:3 callers)
  python3   Debian's python3 running a recursive script
  xz        a shell loop of `xz -9` runs on a 1 MiB file (each process lives ~0.3 s)

"complete" = the walk reached the process or thread root: for hotstack, a STOP row (_start, clone3:
the return address is undefined there); for perf, an outermost frame named _start,
__libc_start_main*, clone3 or start_thread. For xz, every sample of every short process counts,
from the first one (the files' tables are built during a 1 s warm-up run, as on a host where xz
ran before). BPF time from bpf_stats (kernel.bpf_stats_enabled), per sampled event, both programs
(the entry and the tail-called steps). The sampler's CPU is this process's CPU during the run
(serving queued files, nothing else). Kernel map memory: what the unwinder's maps allocate.

Run as root: .venv/bin/python bench/kernel_unwind.py [--seconds 5] [--frequency 99]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "unwind"))

from native_harness import NativeSampler, build_object, run_perf_dwarf  # noqa: E402

from hotstack.ebpf import enable_run_time_stats  # noqa: E402

PERF_ROOTS = ("_start", "clone3", "__clone3", "start_thread", "clone", "__clone")
END_ROOT = 1
END_EXITED = 8     # bpf/native_unwind.h NU_END_EXITED: the task had no address space left (in exit)
EXIT_FRAMES = ("exit_mmap", "do_exit")


def perf_complete(samples) -> float:
    """A stripped executable's _start has no name: [unknown] below __libc_start_main counts as root."""
    ok = [n for n, _ in samples if n]
    return sum(n[0] in PERF_ROOTS or n[0].startswith("__libc_start_main")
               or (len(n) > 1 and n[0] == "[unknown]" and n[1].startswith("__libc_start_main")) for n in ok) \
        / max(len(ok), 1)


def rest_complete(r: dict) -> float:
    """The complete share of the samples taken while the process still had its address space (in
    exit_mmap no profiler can read a user stack: hotstack's walk ends as 'exited', perf's copy of the
    user stack is empty; both are counted in 'in exit' and printed)."""
    alive = r["samples"] - r["exited"]
    return 100 * r["complete"] * r["samples"] / alive if alive else 0.0


def workloads(tmp: Path) -> dict[str, list[str]]:
    wl = ROOT / "tests" / "unwind" / "workloads"
    subprocess.run(["cc", "-O2", "-fomit-frame-pointer", str(wl / "callback.c"), "-o", str(tmp / "callback")], check=True)
    subprocess.run(["cc", "-O1", "-fno-omit-frame-pointer", "-fno-builtin", str(wl / "libc_leaf.c"), "-o",
                    str(tmp / "libcleaf")], check=True)
    (tmp / "data").write_bytes(os.urandom(1 << 19) * 2)
    return {
        "callback": [str(tmp / "callback")],
        "libcleaf": [str(tmp / "libcleaf")],
        "python3": ["/usr/bin/python3", str(ROOT / "tests/unwind/workloads/recursion.py")],
        "xz": ["sh", "-c", f"while :; do xz -9 -c {tmp / 'data'} > /dev/null; done"],
    }


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_ours(obj: Path, argv: list[str], name: str, seconds: float, frequency: int, tmp: Path) -> dict:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    by_comm = "xz" if name == "xz" else ""
    sampler = NativeSampler(obj, target=0 if by_comm else proc.pid, comm=by_comm)
    try:
        t0 = time.perf_counter()
        c0 = cpu_self()
        if not by_comm:
            sampler.preload(proc.pid)
        else:
            sampler.start(frequency)
            sampler.run(1.0)         # warm-up: the first xz processes' files get their tables
            sampler.stop()
            for key in list(sampler.collection.maps["counts"].keys()):
                sampler.collection.maps["counts"].delete(key)
        startup_cpu = cpu_self() - c0
        startup_wall = time.perf_counter() - t0
        before = sampler.tables.kernel_counters()
        progs = [sampler.collection.programs["nu_test_sample"], sampler.collection.programs["nu_test_step"]]
        s0 = [p.stats() for p in progs]
        c1 = cpu_self()
        sampler.start(frequency)
        sampler.run(seconds)
        sampler.stop()
        cpu = cpu_self() - c1
        s1 = [p.stats() for p in progs]
        after = sampler.tables.kernel_counters()
        d = {k: after[k] - before[k] for k in after}
        stacks = sampler.stacks()
        samples = sum(c for *_, c in stacks)
        complete = sum(c for _, _, _, end, c in stacks if end == END_ROOT) / max(samples, 1)
        exited = sum(c for _, _, _, end, c in stacks if end == END_EXITED)
        depth = sum(len(pcs) * c for _, _, pcs, _, c in stacks) / max(samples, 1)
        bpf_ns = sum(b.run_time_ns - a.run_time_ns for a, b in zip(s0, s1))
        runs = s1[0].run_count - s0[0].run_count
        mem = sampler.tables.memory_bytes()
        return {"samples": samples, "complete": complete, "exited": exited, "depth": depth, "bpf_ns_per_sample": bpf_ns / max(runs, 1),
                "cpu_s": cpu, "startup_cpu_s": startup_cpu, "startup_wall_s": startup_wall,
                "files": sampler.tables.counters.files_loaded, "rows": sampler.tables.rows_used,
                "fp_frames": d["fp_frames"], "frames": d["frames"], "no_table": d["no_table"],
                "map_bytes": sum(mem.values()), "map_detail": mem}
    finally:
        sampler.close()
        proc.kill()
        proc.wait()


def run_perf(argv: list[str], name: str, seconds: float, frequency: int, tmp: Path) -> dict | None:
    if shutil.which("perf") is None:
        return None
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if name == "xz":
        data = tmp / "perf-xz.data"
        subprocess.run(["perf", "record", "-q", "-F", str(frequency), "--call-graph", "dwarf", "-o", str(data), "--",
                        "timeout", str(seconds), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = subprocess.run(["perf", "script", "--no-inline", "-i", str(data), "--comms", "xz", "-F", "ip,sym,dso"],
                             capture_output=True, text=True).stdout
        samples, cur, exiting = [], [], False
        for line in out.splitlines() + [""]:
            if not line.strip():
                if cur:
                    samples.append((list(reversed(cur)), ["exiting"] if exiting else []))
                cur, exiting = [], False
                continue
            parts = line.split(None, 1)
            sym, _, dso = (parts[1] if len(parts) > 1 else "").rpartition(" (")
            if "kernel" in dso and sym.split("+0x")[0].strip() in EXIT_FRAMES:
                exiting = True
            if "kernel" not in dso and "vdso" not in dso:
                cur.append(sym.split("+0x")[0].strip() or "[unknown]")
    else:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        try:
            samples = run_perf_dwarf(proc.pid, seconds, frequency, tmp)
        finally:
            proc.kill()
            proc.wait()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"samples": len(samples), "complete": perf_complete(samples),
            "exited": sum(1 for _, tags in samples if tags == ["exiting"]),
            "cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--frequency", type=int, default=99)
    args = parser.parse_args()
    stats_fd = enable_run_time_stats()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        obj = build_object(tmp)
        print(f"{'workload':<10} {'who':<8} {'samples':>7} {'complete':>9} {'in exit':>7} {'rest':>7}"
              f" {'depth':>6} {'BPF us/sample':>14}"
              f" {'CPU s':>7} {'start-up CPU s':>15} {'files':>6} {'rows':>8} {'FP frames':>10}")
        for name, argv in workloads(tmp).items():
            ours = run_ours(obj, argv, name, args.seconds, args.frequency, tmp)
            print(f"{name:<10} {'hotstack':<8} {ours['samples']:>7} {100 * ours['complete']:>8.1f}% {ours['exited']:>7}"
                  f" {rest_complete(ours):>6.1f}% {ours['depth']:>6.1f}"
                  f" {ours['bpf_ns_per_sample'] / 1e3:>14.2f} {ours['cpu_s']:>7.3f} {ours['startup_cpu_s']:>15.3f}"
                  f" {ours['files']:>6} {ours['rows']:>8} {ours['fp_frames']:>10}")
            perf = run_perf(argv, name, args.seconds, args.frequency, tmp)
            if perf:
                print(f"{name:<10} {'perf':<8} {perf['samples']:>7} {100 * perf['complete']:>8.1f}% {perf['exited']:>7}"
                      f" {rest_complete(perf):>6.1f}% {'':>6} {'':>14}"
                      f" {perf['cpu_s']:>7.3f}   (record + script, --call-graph dwarf)")
        print(f"kernel map memory of the unwinder (as sized for this run): {ours['map_bytes'] / 2**20:.1f} MiB "
              + ", ".join(f"{k} {v / 2**20:.2f}" for k, v in ours["map_detail"].items()))
    os.close(stats_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
