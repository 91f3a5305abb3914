"""Every input the fuzzer (bench/fuzz_symbols.py) ever found failing is replayed here for good."""

from __future__ import annotations

from pathlib import Path

import pytest

from .replay import exercise_elf, exercise_pclntab, exercise_perf_map

CRASHERS = sorted((Path(__file__).resolve().parent / "crashers").glob("*.bin"))


@pytest.mark.timeout(20)
@pytest.mark.parametrize("path", CRASHERS, ids=[p.name for p in CRASHERS])
def test_crasher_is_refused_cleanly(path: Path, tmp_path):
    data = path.read_bytes()
    if path.name.startswith("elf"):
        copy = tmp_path / "input.elf"
        copy.write_bytes(data)
        exercise_elf(str(copy))
    elif path.name.startswith("pclntab"):
        exercise_pclntab(data)
    else:
        exercise_perf_map(data)


def test_hand_made_bad_files(tmp_path):
    """Cases named in the issue, made by hand: empty, truncated, absurd counts, not a file."""
    cases = {
        "empty": b"",
        "short": b"\x7fELF",
        "not-elf": b"hello world" * 20,
        "elf32": b"\x7fELF\x01\x01" + b"\0" * 100,
        "huge-counts": b"\x7fELF\x02\x01\x01" + b"\0" * 9 + b"\x02\x00\x3e\x00" + b"\0" * 4 + b"\0" * 8
                       + (64).to_bytes(8, "little") + (64).to_bytes(8, "little") + b"\0" * 4
                       + b"\x40\x00\x38\x00\xff\xff\x40\x00\xff\xff\xfe\xff" + b"\0" * 64,
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        exercise_elf(str(path))
    exercise_elf(str(tmp_path))          # a directory
    exercise_elf("/dev/zero")            # a device: never read
    exercise_pclntab(b"\xf1\xff\xff\xff\x00\x00\x01\x08" + b"\xff" * 64)
    exercise_perf_map(b"\xff" * 10000 + b"\n1 2 x\n" + b"a" * 100000)
