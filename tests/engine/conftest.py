from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import compile_c

HERE = Path(__file__).resolve().parent
# Frame pointers everywhere, leaves included (Debian's gcc omits them in leaf functions otherwise,
# which hides the leaf's caller from any frame-pointer unwinder, perf's included).
FP_FLAGS = ("-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer")


@pytest.fixture(scope="session")
def hot_ab(build_dir) -> Path:
    """The 75/25 workload, with frame pointers."""
    return compile_c(HERE / "workloads" / "hot_ab.c", build_dir / "hot_ab", *FP_FLAGS)


@pytest.fixture(scope="session")
def hot_ab_stripped(build_dir) -> Path:
    return compile_c(HERE / "workloads" / "hot_ab.c", build_dir / "hot_ab_stripped", *FP_FLAGS, "-s")
