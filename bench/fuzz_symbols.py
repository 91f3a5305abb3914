"""Fuzz the readers that parse files we did not build: ELF, Go pclntab, perf maps (hypothesis).

    .venv/bin/python bench/fuzz_symbols.py --minutes 10

Seeds are real files built here (a C program, a Go program) and synthesized pclntabs of every
layout. Hypothesis mutates them where the parsers look (headers, section and segment tables,
symbol tables, notes, debuglink, pclntab headers and function tables) and anywhere at random.
A reader may refuse a file (ElfError) but must not raise anything else, hang (a case over
2 s fails) or allocate without bound. Every failing input is written to tests/symbols/crashers/
(test_crashers.py replays them all, so a crasher stays a test case for good).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CRASHERS = ROOT / "tests" / "symbols" / "crashers"

from hotstack.symbols.elf import ElfError, ElfFile  # noqa: E402
from hotstack.symbols.gopclntab import GoPclntab, find_pclntab  # noqa: E402
from hotstack.symbols.perfmap import parse_perf_map  # noqa: E402
from tests.symbols import gopclntab_synth  # noqa: E402
from tests.symbols.replay import exercise_elf, exercise_pclntab, exercise_perf_map  # noqa: E402


def build_seeds(work: Path) -> dict[str, bytes]:
    seeds: dict[str, bytes] = {}
    src = ROOT / "tests" / "symbols" / "workloads"
    if shutil.which("gcc"):
        subprocess.run(["gcc", "-O1", "-Wl,--build-id", str(src / "hot_c.c"), "-o", str(work / "c")], check=True)
        seeds["elf-c"] = (work / "c").read_bytes()
        subprocess.run(["objcopy", "--add-gnu-debuglink=" + str(work / "c"), str(work / "c"), str(work / "cl")],
                       check=True)
        seeds["elf-c-debuglink"] = (work / "cl").read_bytes()
    if shutil.which("go"):
        gosrc = work / "go"
        gosrc.mkdir()
        shutil.copy(src / "hot_go.go", gosrc / "main.go")
        (gosrc / "go.mod").write_text("module example.com/fuzz\n\ngo 1.18\n")
        subprocess.run(["go", "build", "-ldflags=-s -w", "-o", str(work / "gobin"), "."], cwd=gosrc, check=True,
                       env={**os.environ, "CGO_ENABLED": "0"})
        seeds["elf-go"] = (work / "gobin").read_bytes()
    funcs = [{"entry": 0x401000 + 0x40 * i, "name": f"main.f{i}", "file": f"/src/f{i % 3}.go",
              "lines": [(10 + i, 0x401010 + 0x40 * i), (11 + i, 0x401040 + 0x40 * i)]} for i in range(8)]
    for version in ("1.2", "1.16", "1.18", "1.20"):
        seeds[f"pclntab-{version}"] = gopclntab_synth.build(version, funcs)
    seeds["perfmap"] = b"".join(b"%x %x fn_%d [jit]\n" % (0x7F0000001000 + 0x100 * i, 0x80, i) for i in range(50))
    return seeds


def hot_ranges(data: bytes) -> list[tuple[int, int]]:
    """Where an ELF parser looks: headers, tables, notes, the pclntab header and function table."""
    ranges = [(0, 64)]
    try:
        phoff, shoff = struct.unpack_from("<QQ", data, 32)
        phnum, shnum = struct.unpack_from("<H", data, 56)[0], struct.unpack_from("<H", data, 60)[0]
        ranges.append((phoff, phnum * 56))
        ranges.append((shoff, shnum * 64))
        for i in range(shnum):
            _, typ, _, _, off, size = struct.unpack_from("<IIQQQQ", data, shoff + 64 * i)
            if typ in (2, 11, 7, 4) or size < 4096:
                ranges.append((off, min(size, 1 << 16)))
        pos = data.find(b"\xf1\xff\xff\xff\x00\x00")
        if pos >= 0:
            ranges.append((pos, 4096))
    except struct.error:
        pass
    return [(a, b) for a, b in ranges if 0 <= a < len(data) and b > 0]


def mutations(seed: bytes, ranges: list[tuple[int, int]]):
    """A strategy of mutated copies of `seed`, mostly edited inside `ranges`."""
    interesting = st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000,
                                   0xFFFFFFFFFFFFFFFF, 1 << 40, len(seed), len(seed) - 1, len(seed) + 1])
    where = st.one_of(
        st.sampled_from(ranges).flatmap(lambda r: st.integers(r[0], r[0] + r[1] - 1)) if ranges else st.nothing(),
        st.integers(0, max(0, len(seed) - 1)))
    edit = st.one_of(
        st.tuples(st.just("byte"), where, st.integers(0, 255)),
        st.tuples(st.just("word"), where, interesting),
        st.tuples(st.just("cut"), st.integers(0, len(seed)), st.just(0)),
        st.tuples(st.just("copy"), where, where),
    )
    return st.lists(edit, min_size=1, max_size=8).map(lambda edits: _apply(seed, edits))


def _apply(seed: bytes, edits) -> bytes:
    data = bytearray(seed)
    for kind, pos, value in edits:
        if kind == "byte" and pos < len(data):
            data[pos] = value
        elif kind == "word" and pos + 8 <= len(data):
            data[pos:pos + 8] = (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
        elif kind == "cut":
            del data[pos:]
        elif kind == "copy" and pos + 64 <= len(data) and value + 64 <= len(data):
            data[value:value + 64] = data[pos:pos + 64]
    return bytes(data)


def save_crasher(target: str, data: bytes, error: str) -> Path:
    CRASHERS.mkdir(parents=True, exist_ok=True)
    name = f"{target}-{hashlib.sha1(data).hexdigest()[:16]}.bin"
    path = CRASHERS / name
    path.write_bytes(data)
    # The traceback names where it failed, with paths relative to the repo (no machine paths).
    error = error.replace(str(ROOT) + "/", "").replace(os.path.dirname(os.__file__), "<python>")
    (CRASHERS / (name + ".txt")).write_text(error)
    return path


def fuzz(target: str, seed: bytes, seconds: float, scratch: Path) -> tuple[int, list[Path]]:
    exercised = [0]
    found: list[Path] = []
    if target.startswith("elf"):
        strategy = mutations(seed, hot_ranges(seed))
        path = scratch / f"{target}.elf"

        def check(data: bytes) -> None:
            path.write_bytes(data)
            exercise_elf(str(path))
    elif target.startswith("pclntab"):
        strategy = mutations(seed, [(0, 128), (64, len(seed) - 64)])
        check = exercise_pclntab
    else:
        strategy = st.one_of(mutations(seed, [(0, len(seed))]), st.binary(max_size=4096))
        check = exercise_perf_map
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        failing: list[bytes] = []

        @settings(max_examples=200, deadline=2000, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink])
        @given(strategy)
        def case(data: bytes) -> None:
            if time.monotonic() > deadline:
                return
            exercised[0] += 1
            try:
                check(data)
            except Exception:
                failing.append(data)
                raise

        try:
            case()
        except Exception as e:   # a crasher: keep its smallest form as a test case
            data = failing[-1] if failing else b""
            found.append(save_crasher(target, data, "".join(traceback.format_exception(e))[-4000:]))
            print(f"  CRASH {target}: {type(e).__name__}: {e} -> {found[-1].name}", flush=True)
    return exercised[0], found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--only", default="", help="fuzz only targets whose name contains this")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        work = Path(tmp)
        seeds = {k: v for k, v in build_seeds(work).items() if args.only in k}
        per_target = args.minutes * 60 / len(seeds)
        total_cases = 0
        crashers: list[Path] = []
        for target, seed in seeds.items():
            t0 = time.monotonic()
            n, found = fuzz(target, seed, per_target, work)
            total_cases += n
            crashers += found
            print(f"{target:18s} {n:8d} cases in {time.monotonic() - t0:6.1f} s, {len(found)} crashers", flush=True)
    print(f"total: {total_cases} cases, {len(crashers)} crashers kept in {CRASHERS.relative_to(ROOT)}")
    return 1 if crashers else 0


if __name__ == "__main__":
    sys.exit(main())
