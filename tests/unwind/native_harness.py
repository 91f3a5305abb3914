"""The kernel unwinder alone: build tests/unwind/bpf/native_test.bpf.c with clang, load it with our
loader, sample processes with it, and name the frames (with the symbolizer the profiler uses)."""

from __future__ import annotations

import struct
import subprocess
import time
from pathlib import Path

from hotstack.bpf import schema
from hotstack.ebpf import Collection, load_spec, open_cpu_clock_events
from hotstack.unwind.kernel_config import configure
from hotstack.unwind.kernel_maps import NativeTables
from hotstack.unwind.table_cache import TableCache

HERE = Path(__file__).resolve().parent
BPF_DIR = HERE.parent.parent / "src" / "hotstack" / "bpf"
MAX_FRAMES = 128
STACK = schema.NU_STACK           # struct nu_stack: hash, n, end, pid (whose addresses), ..., then the pcs


def build_object(out_dir: Path) -> Path:
    out = out_dir / "native_test.bpf.o"
    if not out.exists():
        arch_include = "/usr/include/" + subprocess.check_output(["uname", "-m"], text=True).strip() + "-linux-gnu"
        subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", f"-I{BPF_DIR}",
                        f"-I{arch_include}", "-Wall", "-Werror", "-c", str(HERE / "bpf" / "native_test.bpf.c"),
                        "-o", str(out)], check=True)
    return out


class NativeSampler:
    def __init__(self, obj: Path, target: int = 0, kernel_vma_walk: bool | None = None, rows: int = 1 << 20,
                 cache_dir: str = "", comm: str = "") -> None:
        spec = load_spec(str(obj))
        self.kernel_walk = configure(spec, rows=rows, kernel_vma_walk=kernel_vma_walk)
        spec.set_constant("target_tgid", target)
        if comm:
            spec.set_constant("target_by_comm", 1)
            spec.set_constant("target_comm", comm.encode()[:15].ljust(16, b"\0"))
        self.collection = Collection.load(spec)
        maps = self.collection.maps
        maps["nu_progs"].update(struct.pack("<I", 0), struct.pack("<I", self.collection.programs["nu_test_step"].fd))
        self.tables = NativeTables(maps, TableCache(directory=cache_dir))
        self.events = []

    def start(self, frequency: int = 99) -> None:
        self.events = open_cpu_clock_events(frequency, self.collection.programs["nu_test_sample"])

    def stop(self) -> None:
        for e in self.events:
            e.close()
        self.events = []

    def close(self) -> None:
        self.stop()
        self.tables.close()
        self.collection.close()

    def preload(self, pid: int) -> None:
        """Tables for every file pid maps (a long-running host has them already)."""
        self.tables.preload_process(pid)
        if not self.kernel_walk:
            self.tables.write_process(pid)

    def run(self, seconds: float, serve_every: float = 0.05, write_pids=()) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.tables.serve_missing()
            if not self.kernel_walk:
                self.tables.serve_remaps()
            for pid in write_pids:
                self.tables.write_process(pid)
            time.sleep(serve_every)
        self.tables.serve_missing()

    def stacks(self) -> list[tuple[int, int, list[int], int, int]]:
        """(pid, tid, pcs leaf first, end reason, count, the pid whose addresses pcs are) of every
        counted stack."""
        stacks = {}
        for key, value in self.collection.maps["stacks"].items():
            (h,) = struct.unpack("<Q", key)
            header = STACK.unpack(value)
            n, end, owner = header.n, header.end, header.pid
            pcs = list(struct.unpack_from(f"<{MAX_FRAMES}Q", value, schema.NU_STACK_TAIL_OFFSET))[:n]
            stacks[h] = (pcs, end, owner)
        out = []
        for key, value in self.collection.maps["counts"].items():
            pid, tid, h = struct.unpack("<IIQ", key)
            (count,) = struct.unpack("<Q", value)
            if h in stacks:
                out.append((pid, tid, stacks[h][0], stacks[h][1], count, stacks[h][2]))
        return out


def symbolize(pid: int, stacks) -> list[tuple[list, int, int]]:
    """(frames root first, end reason, count) per stack of `pid`, named by the profiler's symbolizer."""
    from hotstack.procs import ProcessTable
    from hotstack.symbols.symbolizer import Symbolizer

    processes = ProcessTable()
    processes.observe(pid)
    sym = Symbolizer(processes)
    out = []
    for spid, _tid, pcs, end, count, owner in stacks:
        if spid == pid:
            if owner != pid:
                processes.observe(owner)
            out.append((list(reversed(sym.user_frames(owner, pcs))), end, count))
    return out


def names(frames) -> list[str]:
    return [f.name for f in frames]


def run_perf_dwarf(pid: int, seconds: float, frequency: int, workdir: Path) -> list[tuple[list[str], list[str]]]:
    """perf record --call-graph dwarf on pid: (names, dsos) root first, per sample, user frames only."""
    data = workdir / f"perf-{pid}.data"
    subprocess.run(["perf", "record", "-q", "-F", str(frequency), "--call-graph", "dwarf", "-p", str(pid),
                    "-o", str(data), "--", "sleep", str(seconds)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = subprocess.run(["perf", "script", "--no-inline", "-i", str(data), "-F", "ip,sym,dso"], capture_output=True,
                         text=True).stdout
    samples, cur = [], None
    for line in out.splitlines() + [""]:
        if not line.strip():
            if cur:
                samples.append((list(reversed([n for n, _ in cur])), list(reversed([d for _, d in cur]))))
            cur = []
            continue
        parts = line.split(None, 1)
        rest = parts[1] if len(parts) > 1 else "[unknown]"
        sym, _, dso = rest.rpartition(" (")
        if "kernel" in dso or "vdso" in dso:
            continue
        if cur is None:
            cur = []
        cur.append((sym.split("+0x")[0].strip() or "[unknown]", dso.rstrip(")")))
    return samples
