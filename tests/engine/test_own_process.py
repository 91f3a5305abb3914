"""hotstack's own process is counted but not walked: its samples keep their pid, comm and kernel
stacks, and carry no user frames unless asked (own_stacks, --show-hotstack) or named by --pid. Its
own Python stacks are new in nearly every interval; walking and naming them had been the largest
part of the profiler's cost on a quiet host."""

from __future__ import annotations

import os
import threading
import time

import pytest

from hotstack.procs import own_host_pid
from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

pytestmark = pytest.mark.root


def _own_samples(config: EngineConfig, seconds: float = 1.5, at_least: int = 0) -> list:
    """This process's samples while a thread of it spins for `seconds`, and on until there are
    `at_least` (a count that does not depend on the CPU it gets on a busy machine); and whether the
    Python frame source followed it."""
    stop = threading.Event()
    off_cpu = not config.cpu

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            if off_cpu:
                time.sleep(0.002)      # off the CPU 500 times a second

    with Engine(config) as engine:
        engine.collect()
        spinner = threading.Thread(target=spin)
        spinner.start()
        own = []
        began = time.monotonic()
        try:
            time.sleep(seconds)
            while True:
                own += [s for s in engine.collect()[0].samples if s.pid == os.getpid()]
                if sum(s.value for s in own) >= at_least or time.monotonic() > began + 120:
                    break
                time.sleep(0.5)
        finally:
            stop.set()
            spinner.join()
        names = {source.name: source for source in engine.runtimes}
        followed = "python" in names and os.getpid() in names["python"]._procs
    return own, followed


def _in_host_pid_namespace() -> None:
    if not own_host_pid():
        pytest.skip("the tests run in a pid namespace of their own: hotstack walks itself there (its pid "
                    "may be another process's on the host)")


def test_own_samples_are_counted_without_user_frames():
    _in_host_pid_namespace()
    own, followed = _own_samples(EngineConfig(frequency=199), at_least=50)
    assert sum(s.value for s in own) >= 50, own
    assert all(f.kind is FrameKind.KERNEL for s in own for f in s.stack), [s.stack for s in own][:3]
    assert not followed          # no frame source follows it either


@pytest.mark.parametrize("config", [EngineConfig(frequency=199, own_stacks=True),
                                    EngineConfig(frequency=199, pids=(os.getpid(),))],
                         ids=["own_stacks", "pid"])
def test_own_stacks_when_asked(config):
    own, followed = _own_samples(config, at_least=100)
    with_user = [s for s in own if any(f.kind is not FrameKind.KERNEL for f in s.stack)]
    assert sum(s.value for s in with_user) >= 50, own
    # the spinning thread's own Python function, named by the CPython frame source
    assert any(f.name.endswith(".spin") and f.kind is FrameKind.PYTHON for s in with_user for f in s.stack)
    assert followed


@pytest.mark.parametrize("own_stacks", [False, True], ids=["default", "own_stacks"])
def test_own_off_cpu_waits(own_stacks):
    if not own_stacks:
        _in_host_pid_namespace()
    own, _ = _own_samples(EngineConfig(cpu=False, off_cpu_threshold=1.0, own_stacks=own_stacks))
    assert sum(s.value for s in own) > 0, own[:3]       # its waits are counted either way
    user = [f.name for s in own for f in s.stack if f.kind is not FrameKind.KERNEL]
    if own_stacks:
        assert user                 # walked and named (no frame source runs without the CPU sampler)
    else:
        assert not user, user[:5]   # with their kernel stacks only
