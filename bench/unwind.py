"""Native unwinding without frame pointers: hotstack against `perf record --call-graph dwarf`.

One run, same workloads, same frequency. For each workload (Debian's /usr/bin/python3 running a
recursive script; a C chain 20 calls deep built -O2 -fomit-frame-pointer; `xz -9` compressing a
file) it measures, one after the other on the same running process:

- hotstack, unwind="auto" (snapshots + .eh_frame tables for these binaries);
- hotstack, unwind="fp" (in-kernel frame pointers: the cheap mode, incomplete here);
- perf record --call-graph dwarf (ground truth), its stacks read back with `perf script`;
- the OpenTelemetry eBPF profiler, if its binary is given (--otel) - see RESULTS.md for why it
  may not run here.

Printed per workload: samples, completeness (share of samples whose outermost user frame is the
process or thread root: _start, __libc_start_main, clone3, start_thread; the unnamed entry of a
stripped executable below __libc_start_main), the largest gap in
percentage points between hotstack's and perf's inclusive share over perf's top-20 user functions,
and agent CPU per sample: hotstack's process CPU time (unwinding, symbolizing) plus the BPF
program's run time; perf's `record` plus `script` CPU time (its unwinding happens in `script`).
Finally the unwind-table memory for every binary mapped on this host.

Run as root: .venv/bin/python bench/unwind.py [--seconds 8] [--frequency 99]
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

ROOTS = ("_start", "__libc_start_main", "__libc_start_call_main", "__libc_start_main_alias_2", "clone3",
         "__clone3", "clone", "__clone", "start_thread")

PY_SCRIPT = """
import sys
sys.setrecursionlimit(10000)
def rec(n):
    return sorted(range(200), key=lambda x: -x)[0] if n == 0 else rec(n - 1) + 1
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
while True:
    rec(60)
    fib(18)
"""


def chain_source(depth: int = 20) -> str:
    lines = ["volatile unsigned long sink;"]
    lines.append(f"__attribute__((noinline)) unsigned long f{depth - 1}(unsigned long n)"
                 " { unsigned long x = n; for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + i;"
                 " sink = x; return x; }")
    for k in range(depth - 2, -1, -1):
        lines.append(f"__attribute__((noinline)) unsigned long f{k}(unsigned long n)"
                     f" {{ unsigned long r = f{k + 1}(n + {k}); sink += r; return r ^ n; }}")
    lines.append("int main(void) { unsigned long t = 0; for (;;) t += f0(t); return (int)t; }")
    return "\n".join(lines) + "\n"


def is_root(name: str) -> bool:
    return any(name == r or name.startswith(r + "@") for r in ROOTS) or name.startswith("__libc_start_main")


def canonical(name: str) -> str:
    """One name per function where perf and hotstack pick different aliases of one address."""
    return "__libc_start_main" if name.startswith("__libc_start_main") else name


# -- hotstack -------------------------------------------------------------------------------------
def run_hotstack(pid: int, seconds: float, frequency: int, unwind: str) -> dict:
    from hotstack.sampling import Engine, EngineConfig

    profiler = Engine(EngineConfig(frequency=frequency, pids=(pid,), unwind=unwind, runtime_frames=False))
    with profiler:
        # Warm-up interval, not counted: loading, kallsyms, first table parses and symbol files.
        time.sleep(1.0)
        profiler.collect()
        warm_parse = profiler.unwinder.tables.parse_seconds
        warm_unwind = profiler.unwinder.stats.seconds
        bpf_before = profiler.bpf_run_time_ns()
        bytes_before = profiler.cpu.snapshot_bytes_read
        before = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(seconds)
        profile = profiler.collect()[0]
        after = resource.getrusage(resource.RUSAGE_SELF)
        bpf_ns = profiler.bpf_run_time_ns() - bpf_before
        snapshot_bytes = profiler.cpu.snapshot_bytes_read - bytes_before
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    stacks = []
    for s in profile.samples:
        user = [f.name for f in reversed(s.stack) if f.kind.name != "KERNEL"]
        stacks.append((user, s.value))
    return {"stacks": stacks, "cpu_s": cpu, "bpf_s": bpf_ns / 1e9, "snapshot_bytes": snapshot_bytes,
            "tables_parse_s": profiler.unwinder.tables.parse_seconds - warm_parse,
            "unwind_s": profiler.unwinder.stats.seconds - warm_unwind, "ends": dict(profiler.unwinder.stats.ends)}


def unwinder_alone(pid: int, seconds: float, frequency: int) -> dict:
    """Snapshots of `pid` captured for `seconds`, then unwound again and again offline: the CPU cost
    of the unwinder per sample without the agent's fixed costs (which dominate when the workload
    gets few samples, as on a loaded machine)."""
    from hotstack.procs import ProcessTable
    from types import SimpleNamespace

    from hotstack.sampling import EngineConfig
    from hotstack.sampling.cpu import CpuSampler
    from hotstack.unwind import Unwinder

    snaps = []

    def keep(pid, ip, sp, bp, stack):     # the raw snapshot, kept for the offline rounds
        snaps.append(SimpleNamespace(pid=pid, ip=ip, sp=sp, bp=bp, stack=bytes(stack)))
        return ()

    session = CpuSampler(EngineConfig(frequency=frequency, pids=(pid,), unwind="dwarf", runtime_frames=False), keep)
    session.start()
    try:
        session.attach()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.1)
            session.poll_snapshots()
        session.collect()
    finally:
        session.close()
    unwinder = Unwinder(ProcessTable())
    for s in snaps:                       # first pass: parses the tables
        unwinder.unwind(s.pid, s.ip, s.sp, s.bp, s.stack)
    rounds, frames = 0, 0
    start = time.process_time()
    while time.process_time() - start < 1.0 and snaps:
        for s in snaps:
            frames += len(unwinder.unwind(s.pid, s.ip, s.sp, s.bp, s.stack)[0])
        rounds += 1
    spent = time.process_time() - start
    n = max(rounds * len(snaps), 1)
    return {"snapshots": len(snaps), "us_per_sample": spent / n * 1e6, "frames_per_sample": frames / n,
            "table_bytes": unwinder.tables.nbytes, "tables": len(unwinder.tables)}


# -- perf -----------------------------------------------------------------------------------------
def run_perf(pid: int, seconds: float, frequency: int, workdir: Path) -> dict | None:
    if shutil.which("perf") is None:
        return None
    data = workdir / f"perf-{pid}.data"
    start = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["perf", "record", "-q", "-F", str(frequency), "--call-graph", "dwarf", "-p", str(pid),
                    "-o", str(data), "--", "sleep", str(seconds)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mid = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,tid,ip,sym,dso"],
                         capture_output=True, text=True).stdout
    end = resource.getrusage(resource.RUSAGE_CHILDREN)

    def cpu(a, b):
        return (b.ru_utime - a.ru_utime) + (b.ru_stime - a.ru_stime)

    stacks = []
    current: list[str] | None = None
    for line in out.splitlines():
        if not line.strip():
            if current is not None:
                stacks.append((list(reversed(current)), 1))
            current = None
        elif not line.startswith((" ", "\t")):
            current = []
        elif current is not None:
            parts = line.split(None, 1)
            rest = parts[1] if len(parts) > 1 else "[unknown]"
            sym, _, dso = rest.rpartition(" (")
            if "kernel.kallsyms" in dso or "[kernel" in dso:
                continue
            sym = sym.split("+0x")[0].strip() or "[unknown]"
            current.append(sym)
    if current is not None:
        stacks.append((list(reversed(current)), 1))
    return {"stacks": stacks, "cpu_s": cpu(start, end), "record_s": cpu(start, mid), "script_s": cpu(mid, end)}


# -- OpenTelemetry eBPF profiler -----------------------------------------------------------------
def run_otel(binary: str, pid: int, seconds: float, frequency: int, workdir: Path) -> dict:
    """Runs it against a loopback OTLP receiver (tests/export/otlp_receiver.py, the official
    opentelemetry-proto servicer) and reads back the target's stacks. It reports native frames as
    file addresses without names (symbolization is a backend's job there), so they are named here
    with hotstack's ELF symbol tables, through the target's /proc/PID/maps."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.export.otlp_receiver import OfficialReceiver

    receiver = OfficialReceiver()
    log = workdir / "otel.log"
    start = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        with open(log, "w") as f:
            proc = subprocess.Popen([binary, "-samples-per-second", str(frequency), "-collection-agent",
                                     receiver.endpoint, "-disable-tls", "-reporter-interval", "2s",
                                     "-send-error-frames"], stdout=f, stderr=subprocess.STDOUT)
            time.sleep(seconds)
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        end = resource.getrusage(resource.RUSAGE_CHILDREN)
        requests = receiver.wait_for(1, timeout=1)
    finally:
        receiver.stop()
    stacks, host_samples = _otel_stacks(requests, pid)
    return {"cpu_s": (end.ru_utime - start.ru_utime) + (end.ru_stime - start.ru_stime),
            "returncode": proc.returncode, "log_tail": log.read_text(errors="replace")[-600:],
            "stacks": stacks, "host_samples": host_samples, "requests": len(requests)}


def _otel_stacks(requests, pid: int) -> tuple[list, int]:
    from hotstack.symbols.elf import ElfError, ElfFile
    from hotstack.symbols.symtab import SymbolTable

    files: dict[str, tuple | None] = {}
    maps = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    maps.setdefault(os.path.basename(parts[5]), parts[5])
    except OSError:
        pass

    def name_of(filename: str, address: int) -> str:
        path = maps.get(os.path.basename(filename), filename)
        if path not in files:
            try:
                elf = ElfFile(path)
                files[path] = (elf, SymbolTable(elf))
            except ElfError:
                files[path] = None
        entry = files[path]
        if entry is None:
            return "[unknown]"
        found = entry[1].lookup_many([address])[0]
        return found[0] if found else "[unknown]"

    stacks, host = [], 0
    for request in requests:
        d = request.dictionary
        strings = list(d.string_table)
        for rp in request.resource_profiles:
            resource_attrs = {kv.key: kv.value for kv in rp.resource.attributes}
            for sp in rp.scope_profiles:
                for profile in sp.profiles:
                    for sample in profile.samples:
                        count = max(1, sum(sample.values) if sample.values else len(sample.timestamps_unix_nano))
                        host += count
                        attrs = {strings[d.attribute_table[i].key_strindex]: d.attribute_table[i].value
                                 for i in sample.attribute_indices}
                        attrs.update(resource_attrs)
                        pid_value = next((v for k, v in attrs.items() if k in ("process.pid", "pid")), None)
                        if pid_value is None or pid_value.int_value != pid:
                            continue
                        names = []
                        for li in d.stack_table[sample.stack_index].location_indices:
                            loc = d.location_table[li]
                            frame_type = ""
                            for i in loc.attribute_indices:
                                kv = d.attribute_table[i]
                                if strings[kv.key_strindex] == "profile.frame.type":
                                    frame_type = kv.value.string_value
                            if frame_type == "kernel":
                                continue
                            if loc.lines:
                                names.extend(strings[d.function_table[ln.function_index].name_strindex]
                                             for ln in loc.lines)
                            else:
                                mapping = d.mapping_table[loc.mapping_index] if loc.mapping_index else None
                                filename = strings[mapping.filename_strindex] if mapping is not None else ""
                                names.append(name_of(filename, loc.address) if filename else f"[{frame_type or '?'}]")
                        stacks.append((list(reversed(names)), count))
    return stacks, host


# -- figures --------------------------------------------------------------------------------------
def reaches_root(stack: list[str]) -> bool:
    """Root first. A stripped executable's `_start` has no name: below __libc_start_main it is the root."""
    return bool(stack) and (is_root(stack[0]) or (len(stack) > 1 and stack[1].startswith("__libc_start_main")))


def completeness(stacks) -> tuple[float, int]:
    total = sum(c for _, c in stacks)
    complete = sum(c for s, c in stacks if reaches_root(s))
    return (complete / total if total else 0.0), total


def inclusive(stacks) -> dict[str, float]:
    total = sum(c for _, c in stacks) or 1
    counts: Counter = Counter()
    for s, c in stacks:
        for name in {canonical(n) for n in s}:
            counts[name] += c
    return {k: v / total for k, v in counts.items()}


def top_gap(ours, perf, n: int = 20) -> tuple[float, str]:
    a, b = inclusive(ours), inclusive(perf)
    top = [k for k, _ in sorted(b.items(), key=lambda kv: -kv[1]) if k != "[unknown]"][:n]
    gaps = [(abs(a.get(k, 0.0) - b[k]) * 100, k) for k in top]
    return max(gaps) if gaps else (0.0, "")


def table_memory() -> tuple[int, int, float]:
    """(distinct binaries, bytes of their tables, seconds to build) for every process on the host."""
    from hotstack.procs import ProcessTable
    from hotstack.unwind import TableStore

    store, procs = TableStore(max_bytes=1 << 40, cache_dir=""), ProcessTable()
    start = time.perf_counter()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        info = procs.observe(int(entry))
        if info is None:
            continue
        for mapping in info.mappings.mappings:
            if mapping.is_file:
                store.mapped(info, mapping)
    return len(store), store.nbytes, time.perf_counter() - start


def start_workload(name: str, workdir: Path) -> subprocess.Popen:
    if name == "python3":
        script = workdir / "recurse.py"
        script.write_text(PY_SCRIPT)
        argv = ["/usr/bin/python3", str(script)]
    elif name == "c-chain-20":
        src = workdir / "chain20.c"
        src.write_text(chain_source())
        subprocess.run(["cc", "-O2", "-fomit-frame-pointer", str(src), "-o", str(workdir / "chain20")], check=True)
        argv = [str(workdir / "chain20")]
    else:   # xz -9 on a file big enough to outlast every measurement; pseudo-random text compresses slowly
        data = workdir / "input.txt"
        with open(data, "wb") as f:
            import random
            rnd = random.Random(6)
            words = [bytes(rnd.choice(b"abcdefghij") for _ in range(rnd.randint(2, 9))) for _ in range(5000)]
            for _ in range(40):
                f.write(b" ".join(rnd.choice(words) for _ in range(300_000)))
        argv = ["sh", "-c", f"while :; do xz -9 -T1 -c {data} > /dev/null; done"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def target_pid(proc: subprocess.Popen, name: str) -> int:
    if name != "xz":
        return proc.pid
    for _ in range(50):   # the xz child of the shell loop
        out = subprocess.run(["pgrep", "-P", str(proc.pid), "xz"], capture_output=True, text=True).stdout.split()
        if out:
            return int(out[0])
        time.sleep(0.1)
    raise RuntimeError("xz did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--frequency", type=int, default=99)
    ap.add_argument("--otel", default=os.environ.get("HOTSTACK_OTEL_PROFILER", ""),
                    help="path of the OpenTelemetry eBPF profiler binary (optional)")
    ap.add_argument("--workloads", default="python3,c-chain-20,xz")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/unwind.py needs root (eBPF, perf)", file=sys.stderr)
        return 2
    os.environ.setdefault("HOTSTACK_UNWIND_CACHE", "")      # parse tables in the run: count it
    print(f"{args.seconds:g} s per tool, {args.frequency} Hz")
    with tempfile.TemporaryDirectory(prefix="hotstack-bench-unwind-") as tmp:
        workdir = Path(tmp)
        for name in args.workloads.split(","):
            proc = start_workload(name, workdir)
            try:
                time.sleep(1.0)
                pid = target_pid(proc, name)
                auto = run_hotstack(pid, args.seconds, args.frequency, "auto")
                fp = run_hotstack(pid, args.seconds, args.frequency, "fp")
                perf = run_perf(pid, args.seconds, args.frequency, workdir)
                alone = unwinder_alone(pid, min(args.seconds, 4), args.frequency)
                otel = run_otel(args.otel, pid, args.seconds + 10, args.frequency, workdir) if args.otel else None
            finally:
                proc.kill()
                proc.wait()
                if name == "xz":
                    subprocess.run(["pkill", "-P", str(proc.pid)], check=False)
            report(name, auto, fp, perf, otel, alone)
    binaries, nbytes, seconds = table_memory()
    print(f"\nunwind tables for every binary mapped on this host: {binaries} files, {nbytes / 2**20:.1f} MiB "
          f"({nbytes / max(binaries, 1) / 1024:.0f} KiB per file; x100 files = {nbytes / max(binaries, 1) * 100 / 2**20:.1f} MiB), "
          f"built in {seconds:.1f} s")
    return 0


def report(name: str, auto: dict, fp: dict, perf: dict | None, otel: dict | None, alone: dict) -> None:
    print(f"\n== {name}")
    rows = []
    for label, r in (("hotstack auto (snapshots)", auto), ("hotstack fp", fp)):
        ratio, total = completeness(r["stacks"])
        per = (r["cpu_s"] + r["bpf_s"]) / max(total, 1) * 1e6
        extra = f"  (user {r['cpu_s'] / max(total, 1) * 1e6:.0f} µs incl. table parse {r['tables_parse_s']:.2f} s, " \
                f"unwind wall {r['unwind_s'] / max(total, 1) * 1e6:.0f} µs; BPF {r['bpf_s'] / max(total, 1) * 1e6:.1f} µs; " \
                f"{r['snapshot_bytes'] / max(total, 1) / 1024:.1f} KiB/sample)"
        rows.append((label, total, ratio, per, extra))
    if perf is not None:
        ratio, total = completeness(perf["stacks"])
        per = perf["cpu_s"] / max(total, 1) * 1e6
        rows.append(("perf --call-graph dwarf", total, ratio, per,
                     f"  (record {perf['record_s'] / max(total, 1) * 1e6:.0f} µs + script "
                     f"{perf['script_s'] / max(total, 1) * 1e6:.0f} µs)"))
    for label, total, ratio, per, extra in rows:
        print(f"{label:28s} samples {total:5d}  complete {ratio * 100:5.1f}%  agent CPU/sample {per:7.1f} µs{extra}")
    if perf is not None:
        gap, fn = top_gap(auto["stacks"], perf["stacks"])
        fp_gap, fp_fn = top_gap(fp["stacks"], perf["stacks"])
        print(f"top-20 inclusive vs perf: largest gap {gap:.1f} pp ({fn}); fp mode: {fp_gap:.1f} pp ({fp_fn})")
        a_ratio, _ = completeness(auto["stacks"])
        p_ratio, _ = completeness(perf["stacks"])
        a_cpu = (auto["cpu_s"] + auto["bpf_s"]) / max(completeness(auto["stacks"])[1], 1)
        p_cpu = perf["cpu_s"] / max(completeness(perf["stacks"])[1], 1)
        f_cpu = (fp["cpu_s"] + fp["bpf_s"]) / max(completeness(fp["stacks"])[1], 1)
        print(f"ratios: completeness auto/perf {a_ratio / max(p_ratio, 1e-9):.2f}; "
              f"CPU/sample auto/perf {a_cpu / max(p_cpu, 1e-12):.2f}, auto/fp {a_cpu / max(f_cpu, 1e-12):.1f}")
    print(f"unwind ends (auto): {auto['ends']}")
    print(f"unwinder alone (offline, {alone['snapshots']} snapshots): {alone['us_per_sample']:.1f} µs CPU per sample, "
          f"{alone['frames_per_sample']:.1f} frames; tables of this process: {alone['tables']} files, "
          f"{alone['table_bytes'] / 1024:.0f} KiB")
    if otel is not None and otel["stacks"]:
        ratio, total = completeness(otel["stacks"])
        print(f"{'otel ebpf-profiler':28s} samples {total:5d}  complete {ratio * 100:5.1f}%  agent CPU/sample "
              f"{otel['cpu_s'] / max(otel['host_samples'], 1) * 1e6:7.1f} µs  (whole host, startup included: "
              f"{otel['cpu_s']:.2f} s for {otel['host_samples']} samples in {otel['requests']} exports)")
        if perf is not None and otel["stacks"]:
            gap, fn = top_gap(otel["stacks"], perf["stacks"])
            print(f"otel top-20 inclusive vs perf: largest gap {gap:.1f} pp ({fn})")
    if otel is not None and not otel["stacks"]:
        print(f"otel ebpf-profiler: no stacks of the target (exit {otel['returncode']}); "
              f"log tail: {otel['log_tail'][-400:]!r}")


if __name__ == "__main__":
    sys.exit(main())
