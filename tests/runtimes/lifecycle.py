"""The two lifecycle scenarios every runtime's frames must survive, profiled the same way for each
runtime (Java, Node...): a process that starts after the profiler, and one followed from before an
interval that exits in its middle. Each returns the samples of that interval."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from hotstack.sampling import Engine, EngineConfig


def _config() -> EngineConfig:
    return EngineConfig(frequency=499, unwind="kernel")


def started_later(start: Callable[[float], subprocess.Popen], window: float = 2.5) -> list:
    """`start(seconds)` launched 0.3 s into a run (after a first collect) and profiled for `window` s."""
    with Engine(_config()) as prof:
        time.sleep(0.3)
        prof.collect()
        proc = start(20)
        try:
            time.sleep(window)
            return prof.collect()[0].samples
        finally:
            proc.kill()
            proc.wait()


def exiting_mid_interval(start: Callable[[float], subprocess.Popen]) -> list:
    """`start(seconds)` launched before the profiler, followed from an interval's start, stopped by
    SIGTERM (its shutdown, then gone) in its middle; the interval's profile is taken after the exit."""
    proc = start(60)
    try:
        with Engine(_config()) as prof:
            time.sleep(0.5)
            prof.collect()          # the interval starts here, with the process followed
            time.sleep(1.5)
            proc.terminate()
            proc.wait(timeout=30)
            time.sleep(0.5)
            return prof.collect()[0].samples
    finally:
        proc.kill()
        proc.wait()
