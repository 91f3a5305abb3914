#!/usr/bin/env python3
"""What naming samples costs, per command, on the mixed load of bench/otel_profiler.py: for each
sampled process's command, the keys (counted stacks) turned into samples, the user stacks the
symbolizer named (final_user_frames calls: a key whose user stack was named before, in this
interval or the last, is not named again), and the CPU time of both, by the thread's CPU clock.
For this tree and (optionally) other checkouts, alternating, each run in a fresh interpreter, every
run printed.

    sudo .venv/bin/python bench/naming_cost.py [--runs 2] [--seconds 20] [--rate 99] [--tree NAME=OTHER/src]

The load (a Python recursion, an `xz -9` loop, a frame-pointer C program) is started once and runs
under every run; each run samples the whole host for a warm-up collect and then --seconds in 5 s
collects, the Engine's own way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from child import run_json_child  # noqa: E402
from otel_profiler import start_load  # noqa: E402   (the same mixed load)

COMMS = ("python3", "xz", "hot_ab")

# The child: runs with the tree under test first on sys.path; prints one JSON line.
CHILD = r"""
import collections, json, sys, time
seconds, rate, comms = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
for setting in ("malloc", "gc_policy"):
    try:
        __import__(f"hotstack.{setting}", fromlist=["tune"]).tune()
    except ImportError:
        pass
from hotstack.sampling import Engine, EngineConfig
from hotstack.sampling import samples as S

totals = collections.defaultdict(lambda: [0, 0.0])
current = [""]
sample = S.SampleMaker.sample
def timed_sample(self, raw, strip):
    current[0] = raw.comm
    t = time.thread_time()
    try:
        return sample(self, raw, strip)
    finally:
        entry = totals[("keys", raw.comm)]
        entry[0] += 1
        entry[1] += time.thread_time() - t
S.SampleMaker.sample = timed_sample
named = S.Symbolizer.final_user_frames
def timed_named(self, pid, addresses):
    t = time.thread_time()
    try:
        return named(self, pid, addresses)
    finally:
        entry = totals[("stacks", current[0])]
        entry[0] += 1
        entry[1] += time.thread_time() - t
S.Symbolizer.final_user_frames = timed_named

with Engine(EngineConfig(frequency=rate, unwind="kernel")) as engine:
    time.sleep(5)
    engine.collect()
    totals.clear()
    left = seconds
    while left > 0:
        time.sleep(min(5, left))
        left -= 5
        engine.collect()
print(json.dumps({f"{what}:{comm}": totals.get((what, comm), [0, 0.0]) for what in ("keys", "stacks") for comm in comms}))
"""


def run_child(src: str, seconds: float, rate: int) -> dict:
    return run_json_child(CHILD, [str(seconds), str(rate), ",".join(COMMS)], src, ROOT, "naming_cost.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=SRC",
                    help="also measure the src directory SRC of another checkout (repeat for more)")
    args = ap.parse_args()
    trees = [("this", str(ROOT / "src"))] + [tuple(t.split("=", 1)) for t in args.tree]
    print(f"{os.cpu_count()} CPUs, {args.rate} Hz, {args.seconds:.0f} s per run after a warm-up collect; "
          f"keys turned into samples and user stacks named, with their CPU (thread clock)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        load = start_load(Path(tmp))
        try:
            for run in range(args.runs):
                for name, src in trees:
                    r = run_child(src, args.seconds, args.rate)
                    cells = []
                    for comm in COMMS:
                        keys, keys_s = r[f"keys:{comm}"]
                        stacks, stacks_s = r[f"stacks:{comm}"]
                        cells.append(f"{comm} {keys} keys {1e3 * keys_s:.1f} ms, {stacks} stacks named "
                                     f"{1e3 * stacks_s:.1f} ms")
                    print(f"{name:8s} run {run + 1}: " + "; ".join(cells) + f"  load {os.getloadavg()[0]:.1f}",
                          flush=True)
        finally:
            for p in load:
                p.kill()
            if load:
                subprocess.run(["pkill", "-P", str(load[1].pid)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
