"""Samples of a process in its execve, taken after the kernel switched it to the new image but
while its registers are still the old image's (its call of execve): the walk finds no mapping at
the leaf, the process's maps (of either image, read before or after) may not hold it, and a child
of a shell runs its parent's image until then, at the same addresses. Its leaf is named with the
parent's mappings (the C library's execve), not left [unknown], and the stack is shown cut."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from ..conftest import compile_c

pytestmark = pytest.mark.root
HERE = Path(__file__).resolve().parent


def test_a_leaf_in_the_image_before_an_exec_is_named_from_the_parent(build_dir):
    from hotstack.sampling import Engine, EngineConfig

    job = compile_c(HERE / "workloads" / "short_job.c", build_dir / "exec_leaf_job", "-O2")
    engine = Engine(EngineConfig(frequency=999, comms=(job.name,), runtime_frames=False))
    in_exec = []
    with engine:
        loop = subprocess.Popen(["sh", "-c", f"while :; do {job} 0.02; done"])
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (time.monotonic() < deadline - 52 or sum(
                    s.value for s in in_exec) < 40):
                time.sleep(1)
                for s in engine.collect()[0].samples:
                    kernel = [f.name for f in s.stack if f.kind.name == "KERNEL"]
                    user = [f for f in s.stack if f.kind.name != "KERNEL"]
                    # (in execve, the walk cut at its one frame: the old image's leaf)
                    if any("execve" in k for k in kernel) and len(user) == 2 and user[1].name == "[truncated]":
                        in_exec.append(s)
        finally:
            loop.kill()
            loop.wait()
    total = sum(s.value for s in in_exec)
    leaves = Counter(s.stack[-2].name for s in in_exec)
    assert total >= 40, leaves
    named = sum(s.value for s in in_exec if "execve" in s.stack[-2].name)
    # (all but a few here: a process whose parent is not known keeps an [unknown] leaf)
    assert named >= 0.7 * total, leaves
    assert named + leaves["[unknown]"] == total, leaves
