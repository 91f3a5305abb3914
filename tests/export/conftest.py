"""Fixtures of the export tests: the known workload, Go's pprof, peers started and stopped by pid."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ..conftest import compile_c
from .collectors import require_peer

HERE = Path(__file__).resolve().parent
FP_FLAGS = ("-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-Wl,--build-id")


@pytest.fixture(scope="session")
def export_busy(build_dir) -> Path:
    """main -> export_outer -> export_leaf (user CPU) and export_syscalls (kernel CPU)."""
    return compile_c(HERE / "workloads" / "export_busy.c", build_dir / "export_busy", *FP_FLAGS)


@pytest.fixture(scope="session")
def go_pprof() -> list[str]:
    """`go tool pprof` (comes with the Go toolchain)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    require_peer(Path(go) if go else None, "the Go toolchain (go tool pprof)")
    return [go, "tool", "pprof"]


def pprof(go_pprof: list[str], *args: str) -> str:
    r = subprocess.run([*go_pprof, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PPROF_TMPDIR": os.environ.get("TMPDIR", "/tmp")})
    assert r.returncode == 0, r.stderr
    return r.stdout
