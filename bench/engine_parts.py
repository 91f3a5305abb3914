"""Where hotstack's steady CPU goes, by part of the engine, on the mixed load of bench/otel_profiler.py.

hotstack's Engine samples the whole host at --rate Hz for --intervals collects of --interval s,
after a warm-up collect. Each part is timed with the CPU time of the thread that runs it:
  observe  the pid watcher's reads of new processes (Engine._observe_pids)
  poll     the frame sources' naming passes (Engine._poll_runtimes)
  collect  drain, symbolize and build each profile (Engine.collect)
and the process's whole CPU over the same window (every thread: the parts, the unwind thread,
waits), and the kernel's run time of its BPF programs (bpf). Every run is printed, then the medians.
--no-load: an idle host (no load started), where what the profiler costs is its fixed cost: the pid
watcher's rounds, the collects, and its own samples.

    sudo .venv/bin/python bench/engine_parts.py --runs 3
    sudo .venv/bin/python bench/engine_parts.py --runs 3 --src OLD_TREE/src    (an older tree, the same way)
    sudo .venv/bin/python bench/engine_parts.py --runs 3 --rate 99 --no-load    (an idle host)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# --src: the tree measured (this one by default), taken before hotstack is imported
SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv[:-1] else str(ROOT / "src")
sys.path.insert(0, SRC)

from hotstack.sampling import Engine, EngineConfig  # noqa: E402
from hotstack.sampling import engine as engine_module  # noqa: E402

# the process settings that `hotstack`'s front door (cli.main) makes, where the tree has them
for _setting in ("malloc", "gc_policy"):
    try:
        __import__(f"hotstack.{_setting}", fromlist=["tune"]).tune()
    except ImportError:
        pass

sys.path.insert(0, str(ROOT / "bench"))
from otel_profiler import start_load  # noqa: E402   (the same mixed load)

PARTS = ("observe", "poll", "collect")


def timed(totals: dict, part: str, fn):
    def wrapper(*args, **kwargs):
        t = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[part] += time.thread_time() - t
    return wrapper


def one_run(args) -> dict:
    totals = dict.fromkeys(PARTS, 0.0)
    cls = engine_module.Engine
    saved = cls._observe_pids, cls._poll_runtimes
    cls._observe_pids = timed(totals, "observe", saved[0])
    cls._poll_runtimes = timed(totals, "poll", saved[1])
    try:
        with Engine(EngineConfig(frequency=args.rate, unwind="kernel")) as engine:
            time.sleep(args.interval)
            engine.collect()
            for part in PARTS:
                totals[part] = 0.0
            cpu0 = time.process_time()
            bpf0 = engine.bpf_run_time_ns()
            for _ in range(args.intervals):
                time.sleep(args.interval)
                t = time.thread_time()
                engine.collect()
                totals["collect"] += time.thread_time() - t
            totals["process"] = time.process_time() - cpu0
            totals["bpf"] = (engine.bpf_run_time_ns() - bpf0) / 1e9
    finally:
        cls._observe_pids, cls._poll_runtimes = saved
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=19)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--intervals", type=int, default=4)
    parser.add_argument("--src", default=SRC, help="the hotstack tree's src directory (default: this tree's)")
    parser.add_argument("--no-load", action="store_true", help="an idle host: no load is started")
    args = parser.parse_args()
    print(f"tree {args.src}, {args.rate} Hz, {'idle host' if args.no_load else 'mixed load'}", flush=True)
    window = args.interval * args.intervals
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        load = [] if args.no_load else start_load(Path(tmp))
        try:
            for i in range(args.runs):
                r = one_run(args)
                runs.append(r)
                print(f"run {i + 1}: " + "  ".join(f"{k} {v:.3f}" for k, v in r.items())
                      + f" CPU-s over {window:.0f} s ({100 * (r['process'] + r['bpf']) / window:.2f}% of a core with BPF)"
                      + f"  load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            for p in load:
                p.kill()
            if load:
                subprocess.run(["pkill", "-P", str(load[1].pid)], check=False)
    print("median: " + "  ".join(f"{k} {statistics.median(r[k] for r in runs):.3f}" for k in runs[0])
          + f" CPU-s over {window:.0f} s")


if __name__ == "__main__":
    main()
