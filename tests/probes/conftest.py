from __future__ import annotations

import ctypes.util
import os
from pathlib import Path

import pytest

from ..conftest import compile_c

HERE = Path(__file__).resolve().parent
FP_FLAGS = ("-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer")


@pytest.fixture(scope="session")
def malloc_ratio(build_dir) -> Path:
    return compile_c(HERE / "workloads" / "malloc_ratio.c", build_dir / "malloc_ratio", *FP_FLAGS)


@pytest.fixture(scope="session")
def offcpu_split(build_dir) -> Path:
    return compile_c(HERE / "workloads" / "offcpu_split.c", build_dir / "offcpu_split", *FP_FLAGS)


@pytest.fixture(scope="session")
def long_sleep(build_dir) -> Path:
    return compile_c(HERE / "workloads" / "long_sleep.c", build_dir / "long_sleep", *FP_FLAGS)


def libc_path_of(pid: int) -> str:
    """The libc that process `pid` really maps (the seed's /usr/lib/libc.so.6, adapted to this machine)."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if os.path.basename(path).startswith("libc.so"):
                return path
    name = ctypes.util.find_library("c")
    raise AssertionError(f"process {pid} maps no libc (find_library: {name})")


def stack_names(sample) -> list[str]:
    return [f.name for f in sample.stack]
