"""The pids sampled, set while running (the agent's targets by pid): the programs skip every other
process before any unwinding, and the userspace never reads them; the filter opens and closes
without restarting anything."""

from __future__ import annotations

import subprocess
import time

import pytest

from hotstack.sampling import Engine, EngineConfig

pytestmark = pytest.mark.root


def _busy() -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", "while :; do :; done"])


def _pids_sampled(engine: Engine, seconds: float) -> tuple[set[int], int]:
    time.sleep(seconds)
    profile = engine.collect()[0]
    return {s.pid for s in profile.samples}, profile.stats.filtered


def test_pids_set_at_run_time_are_the_only_ones_sampled_and_read():
    a, b, c = _busy(), _busy(), _busy()
    execs = None
    try:
        engine = Engine(EngineConfig(frequency=499, pids_at_run_time=True))
        engine.set_kernel_pids({a.pid})            # before start: the programs load with it
        with engine:
            engine.collect()
            # outside the filter, an exec is not announced either (the exec program shares it)
            execs = subprocess.Popen(["sh", "-c", "sleep 0.3; exec sleep 5"])
            sampled, filtered = _pids_sampled(engine, 1.5)
            assert sampled == {a.pid}, sampled
            assert filtered > 0          # b and c (and the rest of the host) dropped in the kernel
            # never announced, so never read: no maps, no frame-source detection, no tables
            assert not any(engine.processes.known(p.pid) for p in (b, c, execs))

            engine.set_kernel_pids({a.pid, b.pid})
            engine.collect()
            sampled, _ = _pids_sampled(engine, 1.5)
            assert sampled == {a.pid, b.pid}, sampled
            assert engine.processes.known(b.pid)

            engine.set_kernel_pids(None)          # open: every pid
            engine.collect()
            sampled, _ = _pids_sampled(engine, 1.5)
            assert {a.pid, b.pid, c.pid} <= sampled, sampled

            engine.set_kernel_pids({c.pid})       # and closed again, on another pid
            engine.collect()
            sampled, _ = _pids_sampled(engine, 1.5)
            assert sampled == {c.pid}, sampled
    finally:
        for p in (a, b, c, execs):
            if p is not None:
                p.kill()
                p.wait()


def test_fixed_pids_and_pids_at_run_time_exclude_each_other():
    from hotstack.errors import ConfigError
    with pytest.raises(ConfigError, match="exclude each other"):
        EngineConfig(pids=(1,), pids_at_run_time=True).validate()
