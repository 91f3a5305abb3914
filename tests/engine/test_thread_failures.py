"""Failures inside the engine: a frame source that raises on a process (a runtime's detector on a
shape it did not expect) leaves that process without runtime frames, and is said once and counted;
a background thread that raises (here the pid watcher's read of a new process) is logged, counted
and run again, and after THREAD_FAILURES failures the engine has failed: its next collect says so,
and `hotstack run` ends non-zero with one line instead of going on without new processes."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from hotstack.cli import main
from hotstack.errors import EngineFailed
from hotstack.gadget.output import footer
from hotstack.sampling import Engine, EngineConfig
from hotstack.sampling.engine import THREAD_FAILURES

pytestmark = pytest.mark.root


def _failing(source) -> list[int]:
    """Make a real frame source's look at every process raise, as a detector's bug would."""
    seen: list[int] = []

    def look(pid: int) -> bool:
        seen.append(pid)
        raise IndexError("list index out of range")
    source.observe = source.detect = look
    return seen


def test_a_source_that_raises_leaves_one_process_without_its_frames(hot_ab, workloads, caplog):
    workloads([hot_ab, "30", "1"])          # running before the start: looked at by detect()
    engine = Engine(EngineConfig(frequency=99, unwind="kernel"))
    [python] = [s for s in engine.runtimes if s.name == "python"]
    seen = _failing(python)
    engine._runtime_words = None        # (every new process shown to the sources, not only python's)
    with caplog.at_level(logging.ERROR, logger="hotstack.engine"), engine:
        engine.collect()
        started = len(seen)
        for _ in range(3):
            workloads([hot_ab, "1", "1"], settle=0.15)
        deadline = time.monotonic() + 15
        while len(seen) < started + 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        profile = engine.collect()[0]
    assert started >= 1 and len(seen) >= started + 3, seen
    assert engine.failures["python frame source"] == len(seen)
    assert profile.stats.engine_failures >= 3
    assert "failures inside the engine" in footer(profile, 0, 0)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "python frame source failed on pid" in errors[0], errors
    assert engine.failures["hotstack-pids"] == 0


def _failing_rounds(monkeypatch) -> list[float]:
    """Make every round of the pid watcher raise, as a bug in its reads would: a round comes at least
    every IDLE_WAIT_S, so the failures do not wait on new processes (a busy machine's pace)."""
    calls: list[float] = []
    real = Engine._poll_runtimes

    def poll(self):
        if threading.current_thread().name != "hotstack-pids":
            return real(self)
        calls.append(time.monotonic())
        raise ValueError("unexpected /proc line")
    monkeypatch.setattr(Engine, "_poll_runtimes", poll)
    return calls


def test_a_thread_that_raises_is_restarted_and_one_that_keeps_failing_fails_the_engine(monkeypatch, caplog):
    calls = _failing_rounds(monkeypatch)
    with caplog.at_level(logging.ERROR, logger="hotstack.engine"), Engine(EngineConfig(frequency=99)) as engine:
        engine.collect()
        deadline = time.monotonic() + 60
        while engine.failures["hotstack-pids"] < THREAD_FAILURES and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.3)
        assert engine.failures["hotstack-pids"] == THREAD_FAILURES, calls
        with pytest.raises(EngineFailed, match="hotstack-pids failed 5 times, last: ValueError"):
            engine.collect()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert sum("restarted" in e for e in errors) == THREAD_FAILURES - 1, errors
    assert sum("giving up" in e for e in errors) == 1, errors


def test_hotstack_run_ends_non_zero_when_the_engine_fails(monkeypatch, capsys):
    _failing_rounds(monkeypatch)
    started = time.monotonic()
    code = main(["run", "profile_cpu", "--host", "--timeout", "60", "--map-fetch-interval", "1", "-o", "none"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert time.monotonic() - started < 55          # ended by the failure, not by --timeout
    assert "Traceback" not in err
    assert "hotstack-pids failed 5 times" in err.strip().splitlines()[-1]
