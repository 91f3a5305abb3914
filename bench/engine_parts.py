"""Where hotstack's steady CPU goes, by part of the engine, on the mixed load of bench/otel_profiler.py.

hotstack's Engine samples the whole host at --rate Hz for --intervals collects of --interval s,
after a warm-up collect. Each part is timed with the CPU time of the thread that runs it:
  observe  the pid watcher's reads of new processes (Engine._observe_pids)
  poll     the frame sources' naming passes (Engine._poll_runtimes)
  collect  drain, symbolize and build each profile (Engine.collect)
  fold     the CPU profile written as folded stacks (what `-o folded` adds to each interval)
and the process's whole CPU over the same window (every thread: the parts, the unwind thread,
waits), and the kernel's run time of its BPF programs (bpf). Every run is printed, then the medians.
--no-load: an idle host (no load started), where what the profiler costs is its fixed cost: the pid
watcher's rounds, the collects, and its own samples.

    sudo .venv/bin/python bench/engine_parts.py --runs 3
    sudo .venv/bin/python bench/engine_parts.py --runs 3 --src OLD_TREE/src    (an older tree, the same way)
    sudo .venv/bin/python bench/engine_parts.py --runs 3 --rate 99 --no-load    (an idle host)
    sudo .venv/bin/python bench/engine_parts.py --runs 4 --rate 99 --tree old=OLD/src --tree new=NEW/src
        (trees side by side on one load: each run a fresh process, the trees' order alternating)
    sudo .venv/bin/python bench/engine_parts.py --runs 4 --rate 99 --tree venv=src --tree deb=src \
        --python deb=VENV_OF_ANOTHER_PYTHON/bin/python     (one tree under two interpreters)
"""

from __future__ import annotations

import argparse
import json
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
from hotstack.profile.folded import render_folded  # noqa: E402

# the process settings that `hotstack`'s front door (cli.main) makes, where the tree has them
for _setting in ("malloc", "gc_policy"):
    try:
        __import__(f"hotstack.{_setting}", fromlist=["tune"]).tune()
    except ImportError:
        pass

sys.path.insert(0, str(ROOT / "bench"))
from otel_profiler import start_load  # noqa: E402   (the same mixed load)

PARTS = ("observe", "poll", "collect", "fold")


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
                profiles = engine.collect()
                totals["collect"] += time.thread_time() - t
                t = time.thread_time()
                render_folded(profiles[0])
                totals["fold"] += time.thread_time() - t
            totals["process"] = time.process_time() - cpu0
            totals["bpf"] = (engine.bpf_run_time_ns() - bpf0) / 1e9
    finally:
        cls._observe_pids, cls._poll_runtimes = saved
    return totals


def print_run(label: str, r: dict, window: float) -> None:
    print(f"{label}: " + "  ".join(f"{k} {v:.3f}" for k, v in r.items())
          + f" CPU-s over {window:.0f} s ({100 * (r['process'] + r['bpf']) / window:.2f}% of a core with BPF)"
          + f"  load {os.getloadavg()[0]:.1f}", flush=True)


def print_medians(label: str, runs: list[dict], window: float) -> None:
    print(f"median{label}: " + "  ".join(f"{k} {statistics.median(r[k] for r in runs):.3f}" for k in runs[0])
          + f" CPU-s over {window:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=19)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--intervals", type=int, default=4)
    parser.add_argument("--src", default=SRC, help="the hotstack tree's src directory (default: this tree's)")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC",
                        help="measure these trees side by side (repeat): each run a child process of one "
                             "tree, on one load started here, the trees' order alternating from run to run")
    parser.add_argument("--python", action="append", default=[], metavar="NAME=INTERPRETER",
                        help="run the --tree NAME with this Python (default: the one running this script); "
                             "the interpreter needs hotstack's dependencies")
    parser.add_argument("--no-load", action="store_true", help="an idle host: no load is started")
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)   # (a --tree child)
    args = parser.parse_args()
    window = args.interval * args.intervals
    if args.one_run:
        print(json.dumps(one_run(args)))
        return
    trees = [t.split("=", 1) for t in args.tree]
    pythons = dict(p.split("=", 1) for p in args.python)
    for name, python in pythons.items():
        version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                                 text=True, check=True).stdout.strip()
        print(f"{name}: Python {version} ({python})")
    print(f"{', '.join(f'{n}={s}' for n, s in trees) if trees else 'tree ' + args.src}, {args.rate} Hz, "
          f"{'idle host' if args.no_load else 'mixed load'}", flush=True)
    runs: dict[str, list[dict]] = {name: [] for name, _ in trees} if trees else {"": []}
    with tempfile.TemporaryDirectory() as tmp:
        load = [] if args.no_load else start_load(Path(tmp))
        try:
            for i in range(args.runs):
                if not trees:
                    runs[""].append(one_run(args))
                    print_run(f"run {i + 1}", runs[""][-1], window)
                    continue
                for name, src in (trees if i % 2 == 0 else trees[::-1]):
                    child = subprocess.run(
                        [pythons.get(name, sys.executable), __file__, "--one-run", "--src", src, "--rate", str(args.rate),
                         "--interval", str(args.interval), "--intervals", str(args.intervals)],
                        capture_output=True, text=True, check=True)
                    runs[name].append(json.loads(child.stdout.strip().splitlines()[-1]))
                    print_run(f"{name} run {i + 1}", runs[name][-1], window)
        finally:
            for p in load:
                p.kill()
            if load:
                subprocess.run(["pkill", "-P", str(load[1].pid)], check=False)
            for p in load:
                p.wait()
    for name, measured in runs.items():
        print_medians(f" {name}" if name else "", measured, window)


if __name__ == "__main__":
    main()
