"""Frame sources that follow no process cost the pid watcher's rounds nothing but a look at their
retries: no read of the kernel's maps (V8's and HotSpot's passes read their map of recorded
stacks every 0.5 s, processes or not: a few percent of the agent's CPU)."""

from __future__ import annotations

import subprocess
import time

import pytest

from hotstack.sampling import Engine, EngineConfig

pytestmark = pytest.mark.root


def test_sources_without_processes_read_no_map():
    sleeper = subprocess.Popen(["sleep", "30"])     # the one pid sampled: no runtime in it
    try:
        _no_map_read(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()


def _no_map_read(pid: int) -> None:
    with Engine(EngineConfig(frequency=49, pids=(pid,))) as prof:
        reads: list[str] = []
        for source in prof.runtimes:
            kernel = source._kernel
            if kernel is None:
                continue
            for name in ("recorded", "take", "walks"):
                real = getattr(kernel, name)
                setattr(kernel, name, lambda *a, _real=real, _what=f"{source.name}.{name}":
                        reads.append(_what) or _real(*a))
        time.sleep(3.0)             # two or three rounds of the pid watcher
        assert not any(source.tracking() for source in prof.runtimes)
    assert reads == [], reads
