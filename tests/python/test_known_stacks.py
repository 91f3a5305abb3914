"""Stacks userspace holds are not stored again by the walker (bpf/python.h, py_known): a process that
runs what it ran before costs no naming pass, and what it runs for the first time is named before it
exits."""

from __future__ import annotations

import contextlib
import time

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from pyframes_helpers import INTERPRETERS, Target, python_source_listing

pytestmark = pytest.mark.root

SCRIPT = """
import json, sys, threading, time

def spin(n):
    total = 0
    for i in range(n):
        total += i * i
    return total

def steady_a():
    return spin(6000)

def steady_b():
    return spin(3000)

def fresh():
    return spin(4000)

go = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), go.set()), daemon=True).start()
print(json.dumps({}), flush=True)
while not go.is_set():
    steady_a()
    steady_b()
end = time.time() + 0.8
while time.time() < end:
    fresh()
"""


def _names(samples) -> list[list[str]]:
    return [[f.name for f in s.stack if f.kind is FrameKind.PYTHON] for s in samples]


@contextlib.contextmanager
def _listed_target():
    """(target, engine, its CPython source) for SCRIPT's process, once the source has listed it."""
    t = Target(INTERPRETERS[-1][1], SCRIPT, stdin=True)
    try:
        with Engine(EngineConfig(frequency=499, pids=(t.pid,))) as prof:
            yield t, prof, python_source_listing(prof, t.pid)
    finally:
        t.stop()


def test_a_steady_process_stores_nothing_and_new_code_is_named_before_exit():
    takes: list[int] = []
    with _listed_target() as (t, prof, source):
        kernel = source._kernel
        assert kernel.remembers
        time.sleep(2.0)             # its stacks met, named and remembered
        prof.collect()
        real_take = kernel.take
        kernel.take = lambda buffer: takes.append(len(got := real_take(buffer))) or got
        stored = kernel.stored()
        time.sleep(3.0)
        stored = kernel.stored() - stored
        steady = prof.collect()[0].samples
        t.go()
        assert t.proc.wait(timeout=10) == 0
        time.sleep(0.2)
        last = prof.collect()[0].samples
    # ~1500 walks of a process whose few dozen stacks were all met before the window: without
    # py_known each pass took them again (every 0.5 s), and stored them again after
    assert stored <= 15, f"{stored} stacks stored in 3 s of a steady process"
    assert sum(takes) <= 15 + 5, takes
    steady_names = _names(steady)
    assert sum("steady_a" in n for n in steady_names) > 0.3 * len(steady), len(steady)
    assert sum("steady_b" in n for n in steady_names) > 0.1 * len(steady), len(steady)
    unknown = sum(f.startswith("[unknown") for n in steady_names for f in n)
    assert unknown <= 0.02 * sum(map(len, steady_names)), unknown
    # code it ran for the first time in its last 0.8 s, named though it has exited since
    last_names = _names(last)
    fresh = [n for n in last_names if "fresh" in n]
    assert len(fresh) > 0.5 * len(last), (len(fresh), len(last))
    assert all(n[-1] == "<module>" for n in fresh), fresh[:3]
    unknown = sum(f.startswith("[unknown") for n in last_names for f in n)
    assert unknown <= 0.02 * sum(map(len, last_names)), unknown


def test_a_recurring_python_stack_is_named_once_across_intervals():
    """The groups of a Python stack named in one interval serve the next (the same Python stack
    under another native leaf is another sample stack): no frame is made again for it."""
    made: list[int] = []
    with _listed_target() as (t, prof, source):
        time.sleep(2.0)
        prof.collect()
        keys = list(source._known)      # its stacks, remembered across intervals
        assert keys
        real_frames = source.codes.frames      # (each stack named is one call)
        source.codes.frames = lambda *args: made.append(1) or real_frames(*args)
        first = [source.frames(t.pid, key)[0] for key in keys]
        source.collect(prof.cpu.buffers.active ^ 1)     # the next interval
        made.clear()
        again = [source.frames(t.pid, key)[0] for key in keys]
    assert again == first and any(first)
    assert not made, f"{len(made)} stacks named again"
