"""Fixtures of the symbol tests: real binaries built here, profiled by the real CLI."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import hotstack
from tests.peers import require_tool

WORKLOADS = Path(__file__).resolve().parent / "workloads"


need = require_tool


def run(*argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True, **kw)


def profile_folded(*pids: int, seconds: float = 3, extra: tuple[str, ...] = ()) -> str:
    args = ["run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", str(seconds), "--sample-rate", "99", "-o", "folded", *extra]
    for pid in pids:
        args += ["--pid", str(pid)]
    if not pids:
        args.append("--host")   # the whole host (named pids are in scope without it)
    r = hotstack(*args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def frames_of(folded: str) -> list[str]:
    """Every frame name of a folded output (comm first on each line, then the frames)."""
    out = []
    for line in folded.splitlines():
        stack, _, _count = line.rpartition(" ")
        out.extend(stack.split(";")[1:])
    return out


def leaf_counts(folded: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = stack.split(";")[-1]
        counts[leaf] = counts.get(leaf, 0) + int(count)
    return counts


@pytest.fixture(scope="session")
def symbols_build(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("symbols-build")
