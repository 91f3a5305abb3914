"""Peak memory of building one file's kernel unwind table (unwind/kernel_tables.py build_file_table).

Each build runs in a fresh interpreter, so that one file's peak never hides another's: the
process's max RSS (VmHWM) once the file is opened, and again after the build; the difference is
what the build adds to the profiler's peak when it meets that file. With --other-tree, the same
files are built by another checkout's src/ too (say, a worktree of an older commit), alternately,
the same number of times; every run is printed, then the medians and their ratio.

    .venv/bin/python bench/table_memory.py --runs 3 [--other-tree DIR] [FILE ...]

With --meet-collector, the whole Engine instead (49 Hz, whole host, 12 s) starts first; the
OpenTelemetry Collector that CI builds (a 37 MB Go binary) is started a second later, so that the
Engine meets it busy at its start: the Engine's max RSS with an empty unwind-table cache ("cold":
the table is built) and again with the table on disk ("warm"), each tree, every run printed.

Default files: Go binaries (the largest tables: every function's SP deltas) when the CI cache has
them (the OpenTelemetry Collector and eBPF profiler built for tests/peers), Debian's libc and
python3.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from procstat import compile_bytecode

ROOT = Path(__file__).resolve().parent.parent
CACHE = os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci")

# Each child: the tree's src/ first on the path, and its own max RSS (VmHWM) in MB.
_PRELUDE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
"""

_CHILD = _PRELUDE + r"""
from hotstack.symbols.elf import ElfFile
from hotstack.unwind.kernel_tables import build_file_table
elf = ElfFile(sys.argv[2])
before = hwm()
cpu = time.process_time()
table = build_file_table(elf)
print(json.dumps({"rows": len(table), "opened": before, "peak": hwm(), "cpu": time.process_time() - cpu}))
"""

_ENGINE = _PRELUDE + r"""
from hotstack.sampling import Engine, EngineConfig
with Engine(EngineConfig(frequency=49, unwind="kernel")) as engine:
    print(f"{hwm():.1f}", flush=True)
    for _ in range(4):
        time.sleep(3)
        engine.collect()
    print(f"{hwm():.1f}", flush=True)
"""


def meet_collector(trees, runs: int) -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from otel_profiler import start_collector       # the collector as the OTel comparison runs it
    for run in range(1, runs + 1):
        for name, src in trees:
            with tempfile.TemporaryDirectory() as tmp:
                env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "HOTSTACK_UNWIND_CACHE": f"{tmp}/unwind"}
                for cache in ("cold", "warm"):
                    engine = subprocess.Popen([sys.executable, "-c", _ENGINE, str(src)], env=env,
                                              stdout=subprocess.PIPE, text=True)
                    started = float(engine.stdout.readline())
                    collector, _ = start_collector(Path(tmp), "127.0.0.1:9")   # nothing listens: never sent
                    try:
                        peak = float(engine.communicate(timeout=120)[0])
                    finally:
                        collector.kill()
                        collector.wait()
                    print(f"{name:10} run {run} {cache}: max RSS {started:5.1f} MB started, {peak:5.1f} MB "
                          f"after meeting the collector (+{peak - started:.1f})", flush=True)
    return 0


def default_files() -> list[str]:
    found = sorted(glob.glob(f"{CACHE}/otelcol-*/otelcol"))[-1:]
    found += sorted(glob.glob(f"{CACHE}/otel-ebpf-profiler-*/ebpf-profiler"))[-1:]
    for pattern in ("/usr/lib/*-linux-gnu/libc.so.6", "/usr/bin/python3.[0-9]*"):
        found.extend(sorted(p for p in glob.glob(pattern) if not p.endswith("-config"))[:1])
    return found


def build(src: Path, path: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(src), path], capture_output=True, text=True,
                         check=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--other-tree", type=Path, help="another checkout, built alternately with this one")
    ap.add_argument("--meet-collector", action="store_true", help="the Engine meeting the collector")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    trees = [("this tree", ROOT / "src")]
    if args.other_tree is not None:
        trees.insert(0, ("other tree", args.other_tree / "src"))
    # each tree's bytecode first: a tree compiled from source at every start opens its files ~2.5 MB
    # higher, and that freed memory then hides part of the build's peak
    compile_bytecode(src for _, src in trees)
    if args.meet_collector:
        return meet_collector(trees, args.runs)
    files = args.files or default_files()
    if not files:
        print("table_memory: no files to build", file=sys.stderr)
        return 2
    for path in files:
        added: dict[str, list[float]] = {name: [] for name, _ in trees}
        for run in range(1, args.runs + 1):
            for name, src in trees:
                r = build(src, path)
                added[name].append(r["peak"] - r["opened"])
                print(f"{os.path.basename(path):16} {name:10} run {run}: {r['rows']:7} rows  opened "
                      f"{r['opened']:5.1f} MB  peak {r['peak']:5.1f} MB  (+{r['peak'] - r['opened']:4.1f})  "
                      f"{r['cpu']:.2f} CPU-s", flush=True)
        medians = {name: statistics.median(v) for name, v in added.items()}
        line = "  ".join(f"{name} +{m:.1f} MB" for name, m in medians.items())
        if len(trees) == 2 and medians["other tree"] > 0:
            line += f"  ratio {medians['this tree'] / medians['other tree']:.2f}"
        print(f"{os.path.basename(path):16} median added peak: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
