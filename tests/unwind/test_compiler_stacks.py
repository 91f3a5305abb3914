"""A C++ compiler's stacks (Debian's clang++, distro libraries without frame pointers, deep Sema
recursion, optimizer passes with frames over 32 KiB) walked by the kernel unwinder to the root."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter

import pytest

from .conftest import HERE

pytestmark = [pytest.mark.root, pytest.mark.shares]

SECONDS = 25.0


def _compile(out_dir) -> None:
    subprocess.run(["clang++", "-std=c++17", "-O2", "-c", str(HERE / "workloads" / "template_heavy.cpp"),
                    "-o", str(out_dir / "template_heavy.o")], check=True, timeout=300)


def test_clang_compiles_reach_their_root(tmp_path):
    """>= 99% of the compiler's samples reach _start, none cut as [truncated]. Samples in a
    process's exit after its memory is gone (the kernel's end_exited: only `_exit` is read) are
    not counted."""
    if shutil.which("clang++") is None:
        pytest.skip("clang++ is needed")
    from hotstack.profile.model import FrameKind
    from hotstack.sampling import Engine, EngineConfig

    with Engine(EngineConfig(frequency=99, comms=("clang++", "clang"), runtime_frames=False)) as engine:
        _compile(tmp_path)               # the compiler's files' tables built or loaded
        # the deep walk in place from here on, as after the first stack deeper than the shallow
        # walk's frames (whose own test is in test_kernel_unwind.py)
        engine.samplers[0].steps.deepen_if_cut(1)
        engine.collect()
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            _compile(tmp_path)
        samples = engine.collect()[0].samples
    user = [([f.name for f in s.stack if f.kind is not FrameKind.KERNEL], s.value) for s in samples]
    user = [(u, v) for u, v in user if u and u != ["__GI__exit"] and u != ["_exit"]]
    total = sum(v for _, v in user)
    rooted = sum(v for u, v in user if u[-1] == "_start")
    assert total >= 500, total
    assert rooted >= 0.99 * total, Counter(tuple(u[-3:]) for u, v in user if u[-1] != "_start").most_common(8)
    assert not any("[truncated]" in u for u, _ in user)
