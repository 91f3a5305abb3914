#!/usr/bin/env python3
"""hotstack next to the OpenTelemetry eBPF profiler (and `perf record -g`), same mixed load, one run.

Mixed load on all CPUs: Debian's python3 in a recursion (no frame pointers), a shell loop of short
`xz -9` runs (each a new process), and a frame-pointer C program (tests/engine/workloads/hot_ab.c).
At each rate the profilers take turns (same number of runs each, every run printed), whole host:
  hotstack kernel   `hotstack run profile_cpu --unwind kernel` (the default mode)
  hotstack fp       `hotstack run profile_cpu --unwind fp` (frame pointers in the kernel)
  otel              the OpenTelemetry eBPF profiler, exporting OTLP to a real OpenTelemetry Collector
                    (the 0.165 that CI builds, .ci/install.d/collectors.sh), which forwards to a loopback
                    receiver here (tests/export/otlp_receiver.py) so that its stacks can be read back
  perf              `perf record -a -g` (frame pointers; its stacks read with `perf script`)
Per run: steady-state CPU as % of one core (process CPU from /proc/PID/stat, every thread, plus the
run time of its BPF programs from /proc/PID/fdinfo with kernel.bpf_stats_enabled=1, set for the
bench and restored) over --seconds, from --settle seconds after sampling is on (the first poll
where its perf-event programs have run); start-up: CPU-s (process + BPF) and wall seconds until
sampling is on; warm-up: what the first --settle seconds after that cost above the steady rate
(CPU-s); the window of --early (5 s) to --early + --seconds after sampling is on, as % of a core (it
holds part of the warm-up, see --settle);
BPF time per sample (run time / run count of its sampling
programs); max RSS (VmHWM); completeness: the share of samples of xz, python3 and hot_ab whose
outermost user frame is the process root (`_start`, `__libc_start_main*`, `clone`/`clone3`,
`start_thread`; the unnamed entry of a stripped executable just below `__libc_start_main`), strict:
a frame-pointer walk that stops at `__libc_start_call_main` (libc has no frame pointers) or a
Python stack whose outermost frame is `<module>` is not complete; samples whose user stack is the
exit wrapper alone (the process's memory being torn down: nobody can read its stack then) are
counted and printed beside it. hotstack's stacks come from its
folded output (`--map-fetch-interval 5s`, printed every 5 s as an agent would export), the
OpenTelemetry profiler's from what it exported (OTLP, native frames named here from the files'
ELF symbols), perf's from `perf script`.

The OpenTelemetry profiler (go.opentelemetry.io/ebpf-profiler) is built here once, cached by
version under $HOTSTACK_CACHE/otel-ebpf-profiler-<version>/: `CGO_ENABLED=0 go build` from a
throw-away module that requires it, with a `replace` to a copy of the module source (from the Go
module cache) in which rlimit.MaximizeMemlock logs and continues when raising RLIMIT_MEMLOCK fails
(a sandbox's root may lack CAP_SYS_RESOURCE; kernels >= 5.11 charge BPF memory to the memory
cgroup, not to that limit). It needs tracefs, so it runs inside `unshare -m --propagation private`
after mounting tracefs at /sys/kernel/tracing (the host's mounts are untouched).

The trees' bytecode is written first (as `pip install` does; --no-compile to measure compiling too).

Usage: sudo .venv/bin/python bench/otel_profiler.py [--runs 2] [--seconds 20] [--settle 15] [--early 5] [--rates 19,99] [--keep]
       sudo .venv/bin/python bench/otel_profiler.py --tree old=../old/src --only 'hotstack kernel'   # old vs new
       sudo .venv/bin/python bench/otel_profiler.py --python distro=/usr/bin/python3 --only 'hotstack kernel'
       sudo .venv/bin/python bench/otel_profiler.py --build-only
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from procstat import compile_bytecode

ROOT = Path(__file__).resolve().parent.parent
MODULE = "go.opentelemetry.io/ebpf-profiler"
VERSION = "v0.0.202633"
COLLECTOR_VERSION = "0.165.0"
TICKS = os.sysconf("SC_CLK_TCK")


def cache_dir() -> Path:
    return Path(os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci"))


# -- building the peer ----------------------------------------------------------------------------
# The one edit: MaximizeMemlock returns a no-op restore instead of an error when the prlimit fails.
RLIMIT_BEFORE = '\t\treturn nil, fmt.Errorf("failed to set temporary rlimit: %w", err)\n'
RLIMIT_AFTER = ('\t\tif !memlockWarned {\n'
                '\t\t\tmemlockWarned = true\n'
                '\t\t\tlog.Warn(fmt.Sprintf("bench patch: RLIMIT_MEMLOCK not raised (%v), continuing", err))\n'
                '\t\t}\n'
                '\t\treturn func() {}, nil\n')
RLIMIT_APPEND = "\n// Set by the bench patch: the failure is logged once, not at every map update.\nvar memlockWarned bool\n"


def build_peer(version: str) -> Path:
    out = cache_dir() / f"otel-ebpf-profiler-{version}"
    binary = out / "ebpf-profiler"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    work = Path(tempfile.mkdtemp(prefix="otel-peer-build-"))
    try:
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        info = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{version}"], cwd=work, env=env,
                              capture_output=True, text=True)
        if info.returncode != 0:
            raise SystemExit(f"go mod download {MODULE}@{version} failed: {(info.stdout + info.stderr)[-800:]}")
        source = Path(json.loads(info.stdout)["Dir"])
        copy = work / "src"
        shutil.copytree(source, copy)
        for path in copy.rglob("*"):               # the module cache is read-only
            path.chmod(path.stat().st_mode | 0o200)
        rlimit = copy / "rlimit" / "rlimit.go"
        text = rlimit.read_text()
        if RLIMIT_BEFORE not in text:
            raise SystemExit(f"{rlimit.relative_to(copy)} of {version} has changed: the bench patch does not apply")
        rlimit.write_text(text.replace(RLIMIT_BEFORE, RLIMIT_AFTER) + RLIMIT_APPEND)
        (work / "go.mod").write_text(f"module benchpeer\n\ngo 1.25.0\n\nrequire {MODULE} {version}\n\n"
                                     f"replace {MODULE} => ./src\n")
        (work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{MODULE}"\n')
        out.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        build = subprocess.run([go, "build", "-o", str(binary) + ".tmp", MODULE], cwd=work, env=env,
                               capture_output=True, text=True)
        if build.returncode != 0:
            raise SystemExit(f"building {MODULE}@{version} failed: {(build.stdout + build.stderr)[-1500:]}")
        os.replace(str(binary) + ".tmp", binary)
        print(f"built {MODULE}@{version} in {time.monotonic() - started:.0f} s -> {binary}", flush=True)
        return binary
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- measuring one process ------------------------------------------------------------------------
PERF_EVENT_PROG = 7          # BPF_PROG_TYPE_PERF_EVENT: the sampling programs


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of every thread, live and exited, plus waited-for children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(v) for v in fields[11:15]) / TICKS


def bpf_stats(pid: int) -> tuple[int, int, int]:
    """(run_time_ns of every program it holds, run_time_ns and run_cnt of its perf-event programs).
    Tail-called programs count in the time of the program that called them."""
    total = sampling_ns = sampling_cnt = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return 0, 0, 0
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                text = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if "prog_type" not in fields or "run_time_ns" not in fields:      # not a program (maps, links...)
            continue
        ns, cnt = int(fields.get("run_time_ns", 0)), int(fields.get("run_cnt", 0))
        total += ns
        if int(fields["prog_type"]) == PERF_EVENT_PROG:
            sampling_ns += ns
            sampling_cnt += cnt
    return total, sampling_ns, sampling_cnt


def vm_hwm_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_measured(argv: list[str], seconds: float, settle: float, stop_signal: int, log: Path,
                 bpf: bool = True, early: float = 5.0) -> dict:
    """Runs argv, polling its CPU, BPF run time and VmHWM every 0.5 s. Sampling is on at the first poll
    where its perf-event programs have run (at once for perf). Start-up = CPU + BPF time by then;
    steady rate = CPU + BPF time over [on + settle, on + settle + seconds]; warm-up = CPU + BPF time
    over [on, on + settle] less the steady rate's; early rate = over [on + early, on + early +
    seconds]; then it is stopped with `stop_signal`."""
    with open(log, "wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        polls = []       # (t, cpu_s, bpf_ns, sampling_ns, sampling_cnt, hwm)
        on = None
        try:
            while proc.poll() is None and time.monotonic() - started < 300:
                time.sleep(0.5)
                cpu = process_cpu_s(proc.pid)
                if cpu is None:
                    break
                polls.append((time.monotonic() - started, cpu, *bpf_stats(proc.pid), vm_hwm_mb(proc.pid)))
                if on is None and (polls[-1][4] > 0 or not bpf):
                    on = len(polls) - 1
                if on is not None and polls[-1][0] >= polls[on][0] + max(settle, early) + seconds:
                    break
        except BaseException:
            proc.kill()      # a profiler left running would skew every later measurement
            proc.wait()
            raise
        if proc.poll() is not None or on is None:
            raise SystemExit(f"{argv[0]} exited early or never sampled ({proc.returncode}): "
                             f"{log.read_text(errors='replace')[-1500:]}")
        proc.send_signal(stop_signal)
        _wait_ready(proc, 60)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = status
    first = polls[on]

    def at(t: float):
        return next(p for p in polls if p[0] >= first[0] + t)

    def used(a, b) -> float:     # CPU + BPF seconds between two polls
        return (b[1] - a[1]) + (b[2] - a[2]) / 1e9

    at_settled, at_early = at(settle), at(early)
    last = at(settle + seconds)
    steady = used(at_settled, last) / (last[0] - at_settled[0])
    early_end = at(early + seconds)
    return {"steady": steady, "startup": first[1] + first[2] / 1e9, "startup_wall": first[0],
            "warmup": used(first, at_settled) - steady * (at_settled[0] - first[0]),
            "early": used(at_early, early_end) / (early_end[0] - at_early[0]),
            "bpf_per_sample_us": last[3] / last[4] / 1e3 if last[4] else 0.0,
            "sampling_runs": last[4], "bpf_s": last[2] / 1e9,
            "rss_mb": max(max(p[5] for p in polls), usage.ru_maxrss / 1024),
            # when VmHWM first reached its last value, seconds from sampling on (None: at the stop)
            "rss_at": next((p[0] - first[0] for p in polls if p[5] >= usage.ru_maxrss / 1024), None),
            "cpu_total_s": usage.ru_utime + usage.ru_stime, "status": status, "wall": time.monotonic() - started}


def _wait_ready(proc: subprocess.Popen, timeout: float) -> bool:
    """Gives the process `timeout` s to exit after the stop signal, then kills it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.1)
    proc.kill()
    return False


# -- completeness -----------------------------------------------------------------------------------
TARGETS = ("xz", "python3", "hot_ab")
ROOTS = ("_start", "clone", "clone3", "__clone", "__clone3", "start_thread")   # glibc names clone3 __clone3


def reaches_root(stack: list[str]) -> bool:
    """User frames, root first. A stripped executable's `_start` has no name: the frame just below
    `__libc_start_main` is then the root."""
    if not stack:
        return False
    first = stack[0]
    return (first in ROOTS or first.startswith("__libc_start_main")
            or (len(stack) > 1 and stack[1].startswith("__libc_start_main")))


# A sample whose user stack is the exit syscall's wrapper alone: taken while the kernel tore the
# exiting process's memory down (exit_mmap, after exit_mm), when no profiler can read its user stack
# any more. Under xz -9 (674 MB of memory to free) nearly all of xz's incomplete samples are these.
EXIT_LEAVES = ("_exit", "__GI__exit", "_Exit")


def completeness(samples: Counter) -> dict:
    """samples: (comm, root-first user frames) -> count. Per target: (complete share, samples,
    samples stopped in the exit wrapper alone)."""
    out = {}
    for comm in TARGETS:
        total = sum(c for (k, _), c in samples.items() if k == comm)
        done = sum(c for (k, s), c in samples.items() if k == comm and reaches_root(list(s)))
        exiting = sum(c for (k, s), c in samples.items() if k == comm and len(s) == 1 and s[0] in EXIT_LEAVES)
        out[comm] = (done / total if total else 0.0, total, exiting)
    return out


def hotstack_samples(folded: str) -> Counter:
    samples: Counter = Counter()
    for line in folded.splitlines():
        head, _, count = line.rpartition(" ")
        if not count.isdigit() or ";" not in head:
            continue
        comm, *frames = head.split(";")
        samples[("*", ())] += int(count)
        if comm in TARGETS:
            user = [f for f in frames if not f.endswith("_[k]")]
            samples[(comm, tuple(user))] += int(count)
    return samples


@functools.lru_cache(maxsize=None)
def verbose_flag(src: str) -> tuple[str, ...]:
    """["-v"] where the tree's `hotstack run` has it: each unwind table it builds is then logged,
    which tells a run whose max RSS met a large file's first build (bench/RESULTS.md) from one that
    did not. Older trees (--tree) run without it."""
    help_text = subprocess.run([sys.executable, "-m", "hotstack", "run", "--help"], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": src}).stdout
    return ("-v",) if "--verbose" in help_text else ()


def tables_built(log: str) -> list[tuple[str, int]]:
    """(file, rows) of each unwind table a `-v` run logged building."""
    out = []
    for line in log.splitlines():
        if ": unwind table of " in line and " built: " in line:
            path, _, rest = line.split(": unwind table of ", 1)[1].rpartition(" built: ")
            out.append((os.path.basename(path), int(rest.split()[0])))
    return out


def perf_samples(data: Path) -> Counter:
    script = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,ip,sym,dso"], capture_output=True,
                            text=True, errors="replace")
    samples: Counter = Counter()
    for block in script.stdout.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        comm = lines[0].strip().split()[0]
        samples[("*", ())] += 1
        if comm not in TARGETS:
            continue
        user = []
        for ln in lines[1:]:
            parts = ln.split(None, 1)
            if len(parts) < 2 or "[kernel.kallsyms]" in parts[1] or "(vmlinux" in parts[1]:
                continue
            sym = parts[1].rsplit(" (", 1)[0].split("+0x")[0]
            user.append(sym)
        samples[(comm, tuple(reversed(user)))] += 1
    return samples


class Symbolizer:
    """The OpenTelemetry profiler sends native frames as (file, address) without names (naming is
    the backend's job): they are named here with hotstack's ELF symbol tables."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths       # basename -> path, from the load's /proc/PID/maps
        self.files: dict[str, object] = {}

    def name(self, filename: str, address: int) -> str:
        from hotstack.symbols.elf import ElfError, ElfFile
        from hotstack.symbols.symtab import SymbolTable

        path = filename if filename.startswith("/") and os.path.exists(filename) else \
            self.paths.get(os.path.basename(filename), filename)
        if path not in self.files:
            try:
                self.files[path] = SymbolTable(ElfFile(path))
            except (ElfError, OSError):
                self.files[path] = None
        table = self.files[path]
        if table is None:
            return "[unknown]"
        found = table.lookup_many([address])[0]
        return found[0] if found else "[unknown]"


def otel_samples(requests, symbolizer: Symbolizer, seen: Counter) -> Counter:
    from tests.export.otlp_receiver import _any

    samples: Counter = Counter()
    for request in requests:
        d = request.dictionary
        strings = list(d.string_table)

        def attrs(indices):
            return {strings[d.attribute_table[i].key_strindex]: _any(d.attribute_table[i].value, strings)
                    for i in indices}
        for rp in request.resource_profiles:
            for sp in rp.scope_profiles:
                for profile in sp.profiles:
                    for sample in profile.samples:
                        count = max(1, sum(sample.values) if sample.values else len(sample.timestamps_unix_nano))
                        a = attrs(sample.attribute_indices)
                        seen.update(a.keys())
                        comm = a.get("thread.name") or a.get("process.executable.name") or ""
                        samples[("*", ())] += count
                        if comm not in TARGETS:
                            continue
                        names = []
                        for li in d.stack_table[sample.stack_index].location_indices:
                            loc = d.location_table[li]
                            kind = attrs(loc.attribute_indices).get("profile.frame.type", "")
                            if kind == "kernel":
                                continue
                            if loc.lines:
                                names.extend(strings[d.function_table[ln.function_index].name_strindex]
                                             for ln in loc.lines)
                            elif loc.mapping_index:
                                m = d.mapping_table[loc.mapping_index]
                                names.append(symbolizer.name(strings[m.filename_strindex], loc.address))
                            else:
                                names.append(f"[{kind or '?'}]")
                        samples[(comm, tuple(reversed(names)))] += count
    return samples


# -- the peers' services --------------------------------------------------------------------------
COLLECTOR_CONFIG = """\
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{port}
exporters:
  {otlp}:
    endpoint: {forward}
    timeout: 60s
    retry_on_failure:
      enabled: false
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [{otlp}]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_collector(workdir: Path, forward: str) -> tuple[subprocess.Popen, str]:
    binary = cache_dir() / f"otelcol-{COLLECTOR_VERSION}" / "otelcol"
    if not binary.is_file():
        raise SystemExit(f"OpenTelemetry Collector {COLLECTOR_VERSION} not found at $HOTSTACK_CACHE/otelcol-"
                         f"{COLLECTOR_VERSION}/otelcol (built by .ci/install.d/collectors.sh)")
    listing = subprocess.run([str(binary), "components"], capture_output=True, text=True, timeout=60).stdout
    otlp = "otlp_grpc" if "name: otlp_grpc" in listing else "otlp"
    port = free_port() if _port_busy(4317) else 4317
    config = workdir / "otelcol.yaml"
    config.write_text(COLLECTOR_CONFIG.format(port=port, forward=forward, otlp=otlp))
    proc = subprocess.Popen([str(binary), "--config", str(config), "--feature-gates=service.profilesSupport"],
                            stdout=open(workdir / "otelcol.log", "wb"), stderr=subprocess.STDOUT)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"collector exited: {(workdir / 'otelcol.log').read_text()[-1500:]}")
        if _port_busy(port):
            return proc, f"127.0.0.1:{port}"
        time.sleep(0.2)
    raise SystemExit("collector did not listen")


def _port_busy(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def start_load(tmp: Path) -> list[subprocess.Popen]:
    subprocess.run(["cc", "-O2", "-fno-omit-frame-pointer", str(ROOT / "tests/engine/workloads/hot_ab.c"), "-o",
                    str(tmp / "hot_ab")], check=True)
    (tmp / "data").write_bytes(os.urandom(1 << 19) * 2)
    return [subprocess.Popen(["/usr/bin/python3", str(ROOT / "tests/unwind/workloads/recursion.py")]),
            subprocess.Popen(["sh", "-c", f"while :; do xz -9 -c {tmp / 'data'} > /dev/null; done"]),
            subprocess.Popen([str(tmp / "hot_ab")])]


def load_paths(load: list[subprocess.Popen]) -> dict[str, str]:
    pids = [p.pid for p in load]
    for p in load:
        try:
            pids += [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        except OSError:
            pass
    paths = {}
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    paths.setdefault(os.path.basename(parts[5]), parts[5])
        except OSError:
            pass
    return paths


# -- the bench --------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2, help="runs per profiler and rate")
    ap.add_argument("--seconds", type=float, default=20, help="steady-state window of one run")
    # 15 s: hotstack's first collects name every stack for the first time (cold symbol tables, a
    # first interpreter walker verified): its first 5 s interval had cost 0.035 CPU-s where a settled
    # one costs 0.013 and its first collect 0.03-0.04 CPU-s against ~0.01, and a window from 5 s
    # after sampling began with, or beside, that first collect at 5.0-5.5 s (the figure moved
    # 0.92-1.24% a core run to run at 99 Hz). The warm-up is reported on its own.
    ap.add_argument("--settle", type=float, default=15,
                    help="seconds after sampling is on before the steady window (the warm-up before)")
    ap.add_argument("--early", type=float, default=5,
                    help="also the window of --seconds from this many seconds after sampling is on")
    ap.add_argument("--keep", action="store_true", help="keep the run logs (printed directory)")
    ap.add_argument("--rates", default="19,99")
    ap.add_argument("--version", default=VERSION, help=f"{MODULE} version")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=SRC",
                    help="also `hotstack kernel NAME`: hotstack run from the src directory SRC (repeat for more "
                         "trees: an old and a new tree measured in one run, under the same load)")
    ap.add_argument("--python", action="append", default=[], metavar="NAME=INTERPRETER",
                    help="also `hotstack kernel NAME`: this tree run by another CPython of the same minor version "
                         "(e.g. the distribution's /usr/bin/python3), with this interpreter's site-packages on "
                         "its path: what the interpreter's own speed makes of hotstack's cost")
    ap.add_argument("--only", default="", help="comma list of the profilers to run, by name prefix "
                                               "(e.g. 'hotstack kernel'); default all")
    ap.add_argument("--load-only", action="store_true",
                    help="hotstack samples only the load's processes (--comm xz, python3, hot_ab): on a shared "
                         "machine its whole-host RSS and CPU follow whatever else runs (tables and symbols of "
                         "other processes' files)")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not write the trees' bytecode first (then every start compiles hotstack's sources "
                         "where PYTHONDONTWRITEBYTECODE is set)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("otel_profiler.py: run as root", file=sys.stderr)
        return 2
    # the peer (a Go build the first time) and its collector only when it is one of the profilers run
    want_peer = not args.only or any("otel ebpf-profiler".startswith(o) for o in args.only.split(","))
    peer = build_peer(args.version) if want_peer or args.build_only else None
    if args.build_only:
        print(peer)
        return 0
    sys.path.insert(0, str(ROOT))
    from tests.export.otlp_receiver import OfficialReceiver

    rates = [int(r) for r in args.rates.split(",")]
    perf = None if args.no_perf else shutil.which("perf")
    tmp = Path(tempfile.mkdtemp(prefix="hotstack-otel-bench-"))
    os.environ["HOTSTACK_UNWIND_CACHE"] = str(tmp / "cache")
    stats_path = Path("/proc/sys/kernel/bpf_stats_enabled")
    stats_before = stats_path.read_text().strip()
    load, services, rows = [], [], []
    receiver = None
    try:
        stats_path.write_text("1")
        load = start_load(tmp)
        receiver = OfficialReceiver()
        collector_endpoint = "-"
        if want_peer:
            collector, collector_endpoint = start_collector(tmp, receiver.endpoint)
            services.append(collector)
        time.sleep(2)
        symbolizer = Symbolizer(load_paths(load))
        hotstack = [sys.executable, "-m", "hotstack", "run", "profile_cpu", "-t", "0", "--map-fetch-interval", "5s",
                    "-o", "folded", "--host"]
        if args.load_only:
            hotstack += [a for comm in TARGETS for a in ("--comm", comm)]
        tools = {"hotstack kernel": lambda hz: ([*hotstack, *verbose_flag(str(ROOT / "src")), "--sample-rate", str(hz),
                                                 "--unwind", "kernel"], 2),
                 "hotstack fp": lambda hz: ([*hotstack, "--sample-rate", str(hz), "--unwind", "fp"], 2),
                 "otel ebpf-profiler": lambda hz: (
                     ["unshare", "-m", "--propagation", "private", "sh", "-c",
                      'mount -t tracefs tracefs /sys/kernel/tracing && exec "$0" "$@"', str(peer),
                      "-collection-agent", collector_endpoint, "-disable-tls", "-samples-per-second", str(hz)], 15)}
        for tree in args.tree:
            tree_name, src = tree.split("=", 1)
            tools[f"hotstack kernel {tree_name}"] = (
                lambda hz, src=os.path.abspath(src): (["env", f"PYTHONPATH={src}", tree_cache(src), *hotstack,
                                                       *verbose_flag(src),
                                                       "--sample-rate", str(hz), "--unwind", "kernel"], 2))
        for other in args.python:
            py_name, interpreter = other.split("=", 1)
            site = next(p for p in sys.path if p.endswith("site-packages"))
            tools[f"hotstack kernel {py_name}"] = (
                lambda hz, interpreter=interpreter, site=site: (
                    ["env", f"PYTHONPATH={ROOT / 'src'}{os.pathsep}{site}", interpreter,
                     *hotstack[1:], *verbose_flag(str(ROOT / "src")), "--sample-rate", str(hz), "--unwind", "kernel"], 2))
        if not args.no_compile:
            compile_bytecode([str(ROOT / "src")] + [t.split("=", 1)[1] for t in args.tree])
        warm_up(hotstack, tools.get("otel ebpf-profiler") if want_peer else None,
                [os.path.abspath(t.split("=", 1)[1]) for t in args.tree])
        if perf:
            tools["perf record -g"] = lambda hz: ([perf, "record", "-q", "-F", str(hz), "-a", "-g", "-o",
                                                   str(tmp / "perf.data")], 2)
        print(f"{os.cpu_count()} CPUs; {args.runs} runs per profiler and rate, steady state over {args.seconds:.0f} s "
              f"from {args.settle:.0f} s after sampling is on; collector {COLLECTOR_VERSION} on {collector_endpoint}; peer {peer}",
              flush=True)
        names = [n for n in tools if not args.only or any(n.startswith(o) for o in args.only.split(","))]
        seen_attrs: Counter = Counter()
        for hz in rates:
            for run in range(args.runs):
                order = names[run % len(names):] + names[:run % len(names)]     # alternate who goes first
                for name in order:
                    argv, stop = tools[name](hz)
                    log = tmp / f"run-{hz}-{run}-{name.replace(' ', '-')}.log"
                    with receiver._lock:
                        receiver.requests.clear()
                    load_before = os.getloadavg()[0]
                    r = run_measured(argv, args.seconds, args.settle, stop, log, bpf=not name.startswith("perf"),
                                     early=args.early)
                    if name.startswith("hotstack"):
                        text = log.read_text(errors="replace")
                        samples, r["built"] = hotstack_samples(text), tables_built(text)
                    elif name.startswith("perf"):
                        samples = perf_samples(tmp / "perf.data")
                    else:
                        time.sleep(3)        # its last export, through the collector
                        samples = otel_samples(receiver.wait_for(1, timeout=5), symbolizer, seen_attrs)
                    r["complete"] = completeness(samples)
                    r["host_samples"] = samples[("*", ())]
                    r["load"] = (load_before, os.getloadavg()[0])
                    rows.append((name, hz, run, r))
                    print_run(name, hz, run, r, is_perf=name.startswith("perf"))
                    if not any(n for _, n, _ in r["complete"].values()) and not name.startswith("perf"):
                        print(f"  no samples of the load read back; log tail: "
                              f"{log.read_text(errors='replace')[-800:]!r}", flush=True)
        summary(rows, names, rates)
    finally:
        for p in load + services:
            p.kill()
            p.wait()
        if receiver is not None:
            receiver.stop()
        stats_path.write_text(stats_before)
        if args.keep:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def tree_cache(src: str) -> str:
    """The HOTSTACK_UNWIND_CACHE setting of a --tree: a directory of its own beside this tree's, since
    a save removes the tables of older format versions (trees of two versions would else remove each
    other's and build them again in measured runs)."""
    return f"HOTSTACK_UNWIND_CACHE={os.environ['HOTSTACK_UNWIND_CACHE']}-{abs(hash(src)):x}"


def warm_up(hotstack: list[str], peer=None, trees: list[str] = ()) -> None:
    """A first `--unwind kernel` start fills the on-disk table cache, as on any host after its first
    start. With the peer running beside it, so that the code the bench's own services run only while
    the peer exports (the collector's, the receiver's gRPC library: 280-290k rows each) is met too:
    else the first measured run of each rate built one of those tables inside its window (+0.2 CPU-s
    and more, counted as steady state). 20 s at 499 Hz: an export is a few milliseconds of the
    receiver's CPU every few seconds, and 8 s at the default rate can miss it (then a run builds
    cygrpc's 292k rows inside its window). Each --tree is started once too, with its own
    table cache (tree_cache), else its first measured run built every table."""
    beside = None
    if peer is not None:
        argv, _ = peer(19)
        beside = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(5)          # its start-up: it exports from then on
    try:
        warm = [*hotstack[:5], "-t", "20", "--sample-rate", "499", "--unwind", "kernel", "-o", "none", "--host"]
        subprocess.run(warm, capture_output=True)
        for src in trees:
            subprocess.run(["env", f"PYTHONPATH={src}", tree_cache(src), *warm], capture_output=True)
    finally:
        if beside is not None:
            beside.terminate()
            try:
                beside.wait(timeout=10)
            except subprocess.TimeoutExpired:
                beside.kill()
                beside.wait()


def print_run(name: str, hz: int, run: int, r: dict, is_perf: bool) -> None:
    complete = "  ".join(f"{comm} {share * 100:5.1f}% of {n}" + (f" ({exiting} in exit)" if exiting else "")
                         for comm, (share, n, exiting) in r["complete"].items())
    bpf = "" if is_perf else f"BPF {r['bpf_per_sample_us']:5.1f} µs/sample ({r['sampling_runs']} runs)  "
    print(f"{name:18s} {hz:3d} Hz run {run + 1}: steady {r['steady'] * 100:5.2f}% of a core  start-up "
          f"{r['startup']:5.2f} CPU-s ({r['startup_wall']:.0f} s)  warm-up {r['warmup']:5.2f} CPU-s  "
          f"early {r['early'] * 100:5.2f}%  {bpf}max RSS {r['rss_mb']:5.0f} MB{_rss_at(r)}  "
          f"samples read back {r['host_samples']}  complete: {complete}  "
          f"load {r['load'][0]:.1f}->{r['load'][1]:.1f}{_built(r)}", flush=True)


def _rss_at(r: dict) -> str:
    """When the peak was reached: at start-up (imports, first tables), later (a file met then), or
    at the stop (the last collect and output)."""
    at = r.get("rss_at")
    return " (at the stop)" if at is None else f" (at {max(0.0, at):.0f} s)"


def _built(r: dict) -> str:
    """The tables a hotstack run built (-v), the largest named: a first build is a memory peak."""
    built = r.get("built")
    if not built:
        return ""
    name, rows = max(built, key=lambda b: b[1])
    return f"  tables built {len(built)} (largest {name}, {rows} rows)"


def median(values: list[float]) -> float:
    values = sorted(values)
    n = len(values)
    return (values[n // 2] + values[(n - 1) // 2]) / 2 if n else 0.0


def summary(rows, names, rates) -> None:
    print("\nmedians of the runs; completeness pooled over the runs (samples of xz / python3 / hot_ab)")
    print("| profiler | Hz | steady % of a core | start-up CPU-s | warm-up CPU-s | early window % of a core | "
          "BPF µs/sample | max RSS MB | complete xz | complete python3 | complete hot_ab |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    figures = {}
    for hz in rates:
        for name in names:
            mine = [r for n, h, _, r in rows if n == name and h == hz]
            if not mine:
                continue
            f = {k: median([r[k] for r in mine])
                 for k in ("steady", "startup", "warmup", "early", "bpf_per_sample_us", "rss_mb")}
            pooled = []
            for comm in TARGETS:
                n = sum(r["complete"][comm][1] for r in mine)
                done = sum(r["complete"][comm][0] * r["complete"][comm][1] for r in mine)
                exiting = sum(r["complete"][comm][2] for r in mine)
                pooled.append((f"{done / n * 100:.1f}% of {n}" + (f" ({exiting} in exit)" if exiting else ""))
                              if n else "-")
            figures[(name, hz)] = f
            bpf = "-" if name.startswith("perf") else f"{f['bpf_per_sample_us']:.1f}"
            print(f"| {name} | {hz} | {f['steady'] * 100:.2f} | {f['startup']:.2f} | {f['warmup']:.2f} | "
                  f"{f['early'] * 100:.2f} | {bpf} | {f['rss_mb']:.0f} | "
                  + " | ".join(pooled) + " |")
    print("\nratios hotstack / otel ebpf-profiler (medians)")
    print("| hotstack mode | Hz | steady CPU | start-up CPU | warm-up CPU | early window CPU | BPF per sample | max RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for hz in rates:
        peer = figures.get(("otel ebpf-profiler", hz))
        for name in [n for n in names if n.startswith("hotstack")]:
            ours = figures.get((name, hz))
            if not peer or not ours:
                continue
            ratio = [f"{ours[k] / peer[k]:.2f}x" if peer[k] > 0 else "-"
                     for k in ("steady", "startup", "warmup", "early", "bpf_per_sample_us", "rss_mb")]
            print(f"| {name} | {hz} | " + " | ".join(ratio) + " |")


if __name__ == "__main__":
    sys.exit(main())
