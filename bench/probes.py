"""Cost of probe links: the time a probed call takes with and without a uprobe, and hotstack's CPU
while it records 100k hits per second.

Peer: the same program, same build, same run, with no probe attached. Run as root:
    .venv/bin/python bench/probes.py [--calls 2000000] [--rate 100000] [--seconds 10]
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

from hotstack import ebpf  # noqa: E402
from hotstack.sampling import Engine, EngineConfig  # noqa: E402
from hotstack.sampling.probe_links import parse_probe_links  # noqa: E402

WORKLOAD = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) int probed(int x) { __asm__ volatile(""); return x + 1; }
__attribute__((noinline)) int never_called(int x) { __asm__ volatile(""); return x - 1; }

/* ping N: N round trips of one byte through two pipes with a child process; prints ns per round trip. */
static int ping(long n)
{
    int a[2], b[2];
    char c = 0;
    if (pipe(a) || pipe(b)) return 1;
    if (fork() == 0) {
        close(a[1]); close(b[0]);   /* so that the parent's exit ends the child (EOF) */
        while (read(a[0], &c, 1) == 1) if (write(b[1], &c, 1) != 1) break;
        _exit(0);
    }
    close(a[0]); close(b[1]);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) { if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 1; }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.0f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n);
    return 0;
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

int main(int argc, char **argv)
{
    /* tight N: N calls as fast as possible, prints ns per call.
       rate R S: R calls per second for S seconds, in batches every millisecond. */
    volatile int acc = 0;
    if (argv[1][0] == 'p')
        return ping(atol(argv[2]));
    if (argv[1][0] == 't') {
        long n = atol(argv[2]);
        double t0 = now();
        for (long i = 0; i < n; i++) acc = probed(acc);
        printf("%.2f\n", (now() - t0) * 1e9 / n);
        return 0;
    }
    long rate = atol(argv[2]), per_ms = rate / 1000;
    double end = now() + atof(argv[3]), next = now();
    while (now() < end) {
        for (long i = 0; i < per_ms; i++) acc = probed(acc);
        next += 0.001;
        double wait = next - now();
        if (wait > 0) { struct timespec ts = {0, (long)(wait * 1e9)}; nanosleep(&ts, NULL); }
    }
    return 0;
}
"""


def ns_per_call(binary: Path, calls: int) -> float:
    return float(subprocess.run([str(binary), "tight", str(calls)], capture_output=True, text=True,
                                check=True).stdout)


def agent_cpu(binary: Path, symbol: str, rate: int, seconds: float) -> tuple[float, float, int]:
    """(agent CPU seconds, wall seconds, hits recorded) for `hotstack run profile_probe` on `symbol`.

    The agent's own CPU only (os.wait4 rusage): the time of the probe traps themselves is
    charged to the probed program, which is measured apart (ns per call).
    """
    work = subprocess.Popen([str(binary), "rate", str(rate), str(seconds + 4)])
    try:
        time.sleep(0.5)
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            start = time.monotonic()
            agent = subprocess.Popen(
                [sys.executable, "-m", "hotstack", "run", "profile_probe", "--map-fetch-interval", "0", "--probe", f"uprobe:{binary}:{symbol}",
                 "--pid", str(work.pid), "--timeout", str(seconds), "--map-fetch-interval", "1s", "-o", "folded"],
                stdout=out, stderr=err, text=True, cwd=ROOT)
            _pid, status, usage = os.wait4(agent.pid, 0)
            agent.returncode = os.waitstatus_to_exitcode(status)
            wall = time.monotonic() - start
            out.seek(0)
            err.seek(0)
            if agent.returncode:
                raise SystemExit(f"hotstack failed: {err.read()}")
            lines = out.read().splitlines()
    finally:
        work.kill()
        work.wait()
    hits = sum(int(line.rsplit(" ", 1)[1]) for line in lines if line.strip())
    return usage.ru_utime + usage.ru_stime, wall, hits


def offcpu_cost(binary: Path, trips: int = 20000) -> str:
    """Pipe ping-pong between two processes (two context switches per round trip), with and
    without off-CPU profiling of every switch."""
    def round_trip() -> float:
        return min(float(subprocess.run([str(binary), "ping", str(trips)], capture_output=True, text=True,
                                        check=True).stdout) for _ in range(3))

    base = round_trip()
    stats_fd = ebpf.enable_run_time_stats()
    with Engine(EngineConfig(cpu=False, off_cpu_threshold=1.0)) as engine:
        traced = round_trip()
        profile = engine.collect()[0]
        stats = engine.samplers[0].collection.programs["offcpu_sched_switch"].stats()
    os.close(stats_fd)
    return (f"off-CPU: pipe round trip {base / 1000:.1f} us without, {traced / 1000:.1f} us with every switch "
            f"recorded (+{(traced - base) / 2000:.1f} us per context switch, x{traced / base:.2f}); hotstack's "
            f"sched_switch program: {stats.run_time_ns / max(1, stats.run_count) / 1000:.1f} us per switch "
            f"(two stack ids, three map ops); {profile.stats.samples} switches recorded machine-wide")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--rate", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = Path(tmp) / "probed.c", Path(tmp) / "probed"
        source.write_text(WORKLOAD)
        subprocess.run(["cc", "-O2", "-fno-omit-frame-pointer", str(source), "-o", str(binary)], check=True)

        base = min(ns_per_call(binary, args.calls) for _ in range(3))
        stats_fd = ebpf.enable_run_time_stats()   # the BPF program's own time, apart from the trap's
        links = tuple(parse_probe_links([f"uprobe:{binary}:probed"]))
        with Engine(EngineConfig(cpu=False, probe_links=links)) as engine:
            probed = min(ns_per_call(binary, args.calls // 10) for _ in range(3))
            profile = engine.collect()[0]
            stats = engine.samplers[0].collection.programs["probe_uprobe"].stats()
        os.close(stats_fd)
        recorded = sum(s.value for s in profile.samples)
        program_ns = stats.run_time_ns / max(1, stats.run_count)
        print(f"probed call: {base:.1f} ns without the uprobe, {probed:.0f} ns with it "
              f"(+{probed - base:.0f} ns per hit, x{probed / base:.0f}; of which {program_ns:.0f} ns in hotstack's "
              f"BPF program, the rest the kernel's uprobe trap); {recorded} hits recorded of "
              f"{3 * (args.calls // 10)} calls")

        print(offcpu_cost(binary))

        results = {label: agent_cpu(binary, symbol, args.rate, args.seconds)
                   for label, symbol in (("idle", "never_called"), ("busy", "probed"))}
        idle_cpu, idle_wall, _ = results["idle"]
        busy_cpu, busy_wall, hits = results["busy"]
        print(f"hotstack agent over {args.seconds:.0f} s (startup included): {idle_cpu:.2f} s CPU with a probe "
              f"that never fires, {busy_cpu:.2f} s CPU at {hits / args.seconds:,.0f} hits/s "
              f"(asked for {args.rate:,}/s; {100 * busy_cpu / busy_wall:.1f}% of one CPU; "
              f"{100 * (busy_cpu - idle_cpu) / args.seconds:+.1f}% of a CPU for the hits themselves: "
              f"hits are counted in the kernel, the agent only drains one entry per distinct stack)")
        if hits < 0.9 * args.rate * args.seconds:
            print(f"note: the probed program could not call {args.rate:,} times/s: each hit costs it "
                  f"{probed - base:,.0f} ns of uprobe trap on this machine")


if __name__ == "__main__":
    main()
