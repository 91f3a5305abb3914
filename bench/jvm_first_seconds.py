#!/usr/bin/env python3
"""The first JVM a profiler meets: how much of its first seconds is named.

A JVM started 0.3 s after the profiler (so the host's first: the kernel unwinder's step program
with the HotSpot hook is loaded for it) runs tests/runtimes/hotspot/HotWork.java for 3 s on 8
threads (the CPUs kept busy); its samples are taken 0.3 s after it exited. Printed per run: the
share of its workload threads' (hot-N) samples that carry Java frames, and when, after the spawn,
the process was listed for the walker and the hooked step program was in place. Until then a
compiled frame's sample is a lone `[unknown]`.

Each run in a fresh interpreter; with `--tree OTHER` (another checkout) the trees alternate.

    sudo .venv/bin/python bench/jvm_first_seconds.py [--runs 3] [--tree OTHER_CHECKOUT]
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

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, subprocess, sys, time
from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig, runtime_maps

classes = sys.argv[1]
marks = {}
t0 = [0.0]
track, load = runtime_maps.RuntimeMaps.track, runtime_maps.RuntimeMaps._load
def timed_track(self, pid, record):
    if t0[0] and self._roles["processes"] == "hs_procs":
        marks.setdefault("listed", time.monotonic() - t0[0])
    return track(self, pid, record)
def timed_load(self, name):
    program = load(self, name)
    if t0[0]:
        marks.setdefault(f"{name} in place", time.monotonic() - t0[0])
    return program
runtime_maps.RuntimeMaps.track, runtime_maps.RuntimeMaps._load = timed_track, timed_load
with Engine(EngineConfig(frequency=499, unwind="kernel")) as prof:
    time.sleep(0.3)
    prof.collect()
    t0[0] = time.monotonic()
    subprocess.run(["java", "-cp", classes, "HotWork", "3", "8"], capture_output=True, timeout=60, check=True)
    time.sleep(0.3)
    samples = prof.collect()[0].samples
mine = [s for s in samples if s.comm.startswith("hot-")]
named = sum(s.value for s in mine if any(f.kind is FrameKind.JAVA for f in s.stack))
print(json.dumps({"samples": sum(s.value for s in mine), "named": named, "marks": marks}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tree", type=Path, help="another checkout of hotstack to compare with (its src/)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("jvm_first_seconds.py: run as root", file=sys.stderr)
        return 2
    trees = [("this", ROOT)] + ([("other", args.tree.resolve())] if args.tree else [])
    shares: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(["javac", "-d", classes, str(ROOT / "tests/runtimes/hotspot/HotWork.java")], check=True)
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        for run in range(args.runs):
            for label, tree in (trees if run % 2 == 0 else list(reversed(trees))):
                out = subprocess.run([sys.executable, "-c", CHILD, classes], capture_output=True, text=True,
                                     env=dict(os.environ, PYTHONPATH=str(tree / "src")), cwd=tree)
                if out.returncode != 0:
                    raise SystemExit(f"jvm_first_seconds.py: the run in {tree} failed: {out.stderr.strip()[-300:]}")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                share = 100.0 * r["named"] / max(1, r["samples"])
                shares.setdefault(label, []).append(share)
                marks = ", ".join(f"{k} at {v:.2f} s" for k, v in sorted(r["marks"].items(), key=lambda kv: kv[1]))
                print(f"{label:<5} run {run}: {share:5.1f}% of {r['samples']} samples named; {marks}", flush=True)
    print("\nmedian named: " + ", ".join(f"{label} {statistics.median(v):.1f}%" for label, v in shares.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
