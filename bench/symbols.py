"""Symbol table build and lookup on the largest ELF files of this machine: hotstack vs pyelftools
vs nm / addr2line, on the same files in one run.

    .venv/bin/python bench/symbols.py [--files N] [FILE...]

Targets (issue 5): table build >= 20x faster than pyelftools and within 2x of `nm`;
>= 1M address lookups per second in batch. Without FILE arguments the largest ELF files under
the usual library and binary directories are taken (the largest Go binary among them too).
"""

from __future__ import annotations

import argparse
import bisect
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from hotstack.symbols.elf import ElfError, ElfFile  # noqa: E402
from hotstack.symbols.gopclntab import find_pclntab  # noqa: E402
from hotstack.symbols.symtab import SymbolTable  # noqa: E402

SEARCH = ["/usr/lib", "/usr/lib64", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/lib", "/opt"]
LOOKUPS = 1_000_000


def largest_elf_files(limit: int) -> tuple[list[str], str | None]:
    sizes: list[tuple[int, str]] = []
    for top in SEARCH + ([subprocess.run(["go", "env", "GOTOOLDIR"], capture_output=True, text=True).stdout.strip()]
                         if shutil.which("go") else []):
        for dirpath, _, names in os.walk(top):
            for n in names:
                p = os.path.join(dirpath, n)
                try:
                    st = os.stat(p, follow_symlinks=False)
                except OSError:
                    continue
                if st.st_size > 8 << 20 and os.path.isfile(p) and not os.path.islink(p):
                    sizes.append((st.st_size, p))
    sizes.sort(reverse=True)
    natives, go = [], None
    seen = set()
    for _, p in sizes:
        try:
            with ElfFile(p) as elf:
                ident = elf.identity[:2]
                if ident in seen:
                    continue
                seen.add(ident)
                is_go = elf.section(".gopclntab") is not None
                has_syms = any(s.type in (2, 11) and s.size > 1 << 16 for s in elf.sections)
        except ElfError:
            continue
        if is_go and go is None:
            go = p
        elif not is_go and has_syms and len(natives) < limit:
            natives.append(p)
        if go is not None and len(natives) >= limit:
            break
    return natives, go


def best_of(fn, runs: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def hotstack_build(path: str):
    elf = ElfFile(path)
    go = find_pclntab(elf)
    return (go if go is not None else SymbolTable(elf)), elf


def pyelftools_build(path: str):
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    out = []
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for section in elf.iter_sections():
            if isinstance(section, SymbolTableSection):
                for sym in section.iter_symbols():
                    if sym["st_info"]["type"] in ("STT_FUNC", "STT_LOOS") and sym["st_value"]:
                        out.append((sym["st_value"], sym["st_size"], sym.name))
    out.sort()
    return out


def nm_build(path: str, dynamic: bool) -> int:
    args = ["nm", "-n", "--defined-only"] + (["-D"] if dynamic else []) + [path]
    r = subprocess.run(args, capture_output=True)
    return r.stdout.count(b"\n")


def bench_file(path: str, with_pyelftools: bool) -> dict:
    row: dict = {"file": path, "mb": os.path.getsize(path) / 1e6}
    t_hs, (table, elf) = best_of(lambda: hotstack_build(path))
    row["symbols"] = len(table)
    row["hotstack_build_s"] = t_hs
    is_go = not isinstance(table, SymbolTable)
    row["source"] = f"gopclntab {table.version}" if is_go else "symtab/dynsym"
    dynamic = elf.section(".symtab") is None
    row["nm_build_s"], _ = best_of(lambda: nm_build(path, dynamic), runs=2)
    if with_pyelftools:
        t_py, py = best_of(lambda: pyelftools_build(path), runs=1)
        if py:      # a stripped Go binary has nothing pyelftools can read: no comparison
            row["pyelftools_build_s"] = t_py
    # Batch lookups: random addresses over the table's span.
    lo = int(table.entries[0] if is_go else table.values[0])
    hi = int(table.ends[-1] if is_go else table.values[-1])
    rng = np.random.default_rng(1)
    addrs = rng.integers(lo, max(hi, lo + 1), size=LOOKUPS, dtype=np.uint64)
    t, _ = best_of(lambda: table.lookup_indexes(addrs))
    row["lookups_per_s"] = LOOKUPS / t
    few = addrs[:20_000].tolist()
    t, _ = best_of(lambda: table.lookup_many(few), runs=2)
    row["named_lookups_per_s"] = len(few) / t
    if with_pyelftools and py:
        starts = [v for v, _, _ in py]
        sample = addrs[:100_000].tolist()
        t, _ = best_of(lambda: [bisect.bisect_right(starts, a) - 1 for a in sample], runs=1)
        row["pyelftools_lookups_per_s"] = len(sample) / t
    if shutil.which("addr2line"):
        sample = "\n".join(f"{a:#x}" for a in addrs[:2000].tolist()) + "\n"
        t = time.perf_counter()
        subprocess.run(["addr2line", "-f", "-e", path], input=sample.encode(), capture_output=True)
        row["addr2line_lookups_per_s"] = 2000 / (time.perf_counter() - t)
    elf.close()
    return row


def bench_symbolizer(stacks: int = 500, depth: int = 20) -> dict:
    """Symbolizer.user_frames on this process: random 20-frame stacks over its mapped files, first
    pass (files opened, tables built) and again (as an agent sees the same stacks each interval)."""
    import random

    from hotstack.procs import ProcessTable
    from hotstack.symbols.symbolizer import Symbolizer

    pid = os.getpid()
    sym = Symbolizer(ProcessTable())
    info = sym.processes.get(pid)
    execs = [m for m in info.mappings.mappings if "x" in m.perms and m.is_file]
    rnd = random.Random(1)
    work = [[rnd.randrange(m.start, m.end) for m in (rnd.choice(execs) for _ in range(depth))]
            for _ in range(stacks)]
    t = time.perf_counter()
    for st in work:
        sym.user_frames(pid, st)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(5):
        for st in work:
            sym.user_frames(pid, st)
    hot = (time.perf_counter() - t) / 5
    return {"files": len(sym.elf_cache), "cold_frames_per_s": stacks * depth / cold,
            "hot_frames_per_s": stacks * depth / hot, "us_per_stack": hot / stacks * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--files", dest="count", type=int, default=3, help="how many native files to take")
    ap.add_argument("--no-pyelftools", action="store_true")
    args = ap.parse_args()
    if args.files:
        files = args.files
    else:
        natives, go = largest_elf_files(args.count)
        files = natives + ([go] if go else [])
    rows = [bench_file(f, not args.no_pyelftools) for f in files]
    live = bench_symbolizer()
    print(f"{'file':40s} {'MB':>6s} {'symbols':>8s} {'source':>15s} {'hotstack':>9s} {'nm':>8s} {'pyelftools':>10s} "
          f"{'x pyelf':>8s} {'/nm':>5s} {'lookups/s':>10s} {'named/s':>9s} {'a2l/s':>7s}")
    for r in rows:
        py = r.get("pyelftools_build_s")
        print(f"{os.path.basename(r['file'])[:40]:40s} {r['mb']:6.0f} {r['symbols']:8d} {r['source']:>15s} "
              f"{r['hotstack_build_s'] * 1e3:7.1f}ms {r['nm_build_s'] * 1e3:6.0f}ms "
              f"{(py * 1e3 if py else 0):8.0f}ms {(py / r['hotstack_build_s'] if py else 0):7.0f}x "
              f"{r['hotstack_build_s'] / r['nm_build_s']:5.2f} {r['lookups_per_s'] / 1e6:8.1f}M "
              f"{r['named_lookups_per_s'] / 1e3:7.0f}k {r.get('addr2line_lookups_per_s', 0):7.0f}")
    print(f"Symbolizer.user_frames on this process ({live['files']} files): first pass "
          f"{live['cold_frames_per_s']:,.0f} frames/s (tables built), then {live['hot_frames_per_s']:,.0f} "
          f"frames/s ({live['us_per_stack']:.0f} us per 20-frame stack)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
