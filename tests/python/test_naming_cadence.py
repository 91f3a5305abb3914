"""A Python process followed a while is named every NAME_EVERY_SETTLED, a newly listed one every
NAME_EVERY: each naming pass reads the walker's stacks out of the kernel (syscalls, and the
walker stores again what a pass took), and a process that has run a while has named most of
what it runs."""

from __future__ import annotations

import subprocess
import time
import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig
from hotstack.runtimes.common import interpreter_source
from hotstack.runtimes.common.interpreter_source import NAME_EVERY, NAME_EVERY_SETTLED

from pyframes_helpers import python_source_listing

pytestmark = pytest.mark.root


def _takes_in(source, seconds: float) -> int:
    takes: list[float] = []
    real = source._kernel.take
    source._kernel.take = lambda *a: takes.append(time.monotonic()) or real(*a)
    time.sleep(seconds)
    source._kernel.take = real
    return len(takes)


@pytest.mark.shares
def test_passes_slow_down_once_no_process_was_listed_for_a_while(monkeypatch):
    monkeypatch.setattr(interpreter_source, "SETTLED_S", 2.0)
    # a recursion of changing depth: new stacks all the time, so every pass takes some
    workload = subprocess.Popen(["/usr/bin/python3", "-c",
                                 "import random, sys; sys.setrecursionlimit(5000)\n"
                                 "def rec(n): return sum(range(50)) if n == 0 else rec(n - 1) + 1\n"
                                 "while True: rec(random.randrange(20, 400))"])
    try:
        with Engine(EngineConfig(frequency=199, pids=(workload.pid,))) as prof:
            source = python_source_listing(prof, workload.pid)
            young = _takes_in(source, 1.5)          # listed less than SETTLED_S ago
            time.sleep(1.0)
            window = 4.0
            settled = _takes_in(source, window)
            samples = [s for s in prof.collect()[0].samples if s.pid == workload.pid]
    finally:
        workload.kill()
        workload.wait()
    assert young >= 2, f"{young} passes in 1.5 s after the process was listed (every {NAME_EVERY} s)"
    most = window / NAME_EVERY_SETTLED + 2
    assert settled <= most, f"{settled} passes in {window} s once settled (at most {most:.0f})"
    python = [f for s in samples for f in s.stack if f.kind is FrameKind.PYTHON]
    assert sum(f.name == "rec" for f in python) > 0.8 * len(python), \
        sorted({f.name for f in python})[:10]
