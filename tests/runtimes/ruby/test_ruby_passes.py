"""What the pid watcher does, round after round, while a Ruby process runs the same code: the
naming passes and the announced-pid reads it skips (the agent's CPU with 30 interpreter
processes, bench/agent.py), and what it still does when something new comes."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from hotstack.procs import ProcessTable
from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig
from hotstack.symbols.symbolizer import Symbolizer
from hotstack.runtimes.common.interpreter_source import NAME_EVERY
from tests.peers import require_tool
from tests.runtime_fixtures import runtime_source

from rb_helpers import WORKLOAD, RubyTarget

pytestmark = pytest.mark.root


def _count_calls(obj, name: str, calls: list) -> None:
    """Record (time, result) of each call of obj.name (wrapped on the instance)."""
    real = getattr(obj, name)

    def counted(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append((time.monotonic(), result))
        return result
    setattr(obj, name, counted)


@pytest.mark.shares
def test_steady_process_is_taken_out_of_the_kernel_every_name_every_not_every_round(ruby_target):
    """A Ruby process running the same methods: once their stacks are named, a pass that finds
    only stacks it had named waits NAME_EVERY before the next (the rounds go on every ~0.2 s);
    the interval's profile still names every frame."""
    ruby = require_tool("ruby")
    t = ruby_target(ruby, WORKLOAD, "30")
    processes = ProcessTable()
    with Engine(EngineConfig(frequency=499, pids=(t.pid,)), symbolizer=Symbolizer(processes),
                processes=processes) as prof:
        source = runtime_source(prof, "ruby")
        takes: list[float] = []
        _count_calls(source._kernel, "take", takes)
        deadline = time.monotonic() + 10
        while t.pid not in source._procs and time.monotonic() < deadline:
            time.sleep(0.1)
        assert t.pid in source._procs, "the Ruby process was not listed"
        time.sleep(1.0)             # its stacks met and named
        start = len(takes)
        window = 3.0
        time.sleep(window)
        passes = len(takes) - start
        samples = [s for s in prof.collect()[0].samples if s.pid == t.pid]
    # one pass a round (every ~0.2 s) was 15 in the window; now about one per NAME_EVERY, and one
    # sooner when a pass met stacks it had not named yet (9 seen at load average 15: hence the
    # margin, and `shares`: a count of timed passes on a possibly busy machine, rerun once)
    most = 1.5 * window / NAME_EVERY + 2
    assert passes <= most, f"{passes} passes in {window} s (at most {most:.0f})"
    assert passes >= 2, f"only {passes} passes in {window} s: the process was not followed"
    names = Counter(n for s in samples for f in s.stack if f.kind is FrameKind.RUBY for n in [f.name])
    assert names["Workload#hot_a"] > 0 and names["Workload#hot_b"] > 0, names.most_common(8)
    assert names["[unknown ruby]"] <= 0.05 * sum(names.values()), names.most_common(8)


def test_new_pids_are_read_only_when_announced():
    """The map of announced pids is not read at every round of the pid watcher (announcements come
    as records in the wakeups ring; the map holds only those the ring had no room for); a process
    started later is still listed at once."""
    ruby = require_tool("ruby")
    processes = ProcessTable()
    first = RubyTarget(ruby, WORKLOAD, "30")
    second = None
    try:
        with Engine(EngineConfig(frequency=499, comms=("ruby",)), symbolizer=Symbolizer(processes),
                    processes=processes) as prof:
            source = runtime_source(prof, "ruby")
            drains: list[float] = []
            _count_calls(prof.cpu.collection.maps["new_pids"], "drain", drains)
            time.sleep(1.5)         # the first process announced, read, listed: rounds every ~0.2 s
            assert first.pid in source._procs, "the Ruby process was not listed"
            start = len(drains)
            time.sleep(2.0)
            # reads that found nothing (another test's ruby on the host would be announced: read)
            idle_drains = sum(1 for _at, pids in drains[start:] if not pids)
            second = RubyTarget(ruby, WORKLOAD, "30")
            deadline = time.monotonic() + 5
            while second.pid not in source._procs and time.monotonic() < deadline:
                time.sleep(0.05)
            listed_after = time.monotonic() - (deadline - 5)
            assert second.pid in source._procs, "a Ruby process started later was not listed"
    finally:
        first.stop()
        if second is not None:
            second.stop()
    # ~10 rounds in 2 s read the map each before
    assert idle_drains <= 1, f"{idle_drains} reads of new_pids in 2 s found nothing announced"
    assert listed_after < 2.0, f"listed {listed_after:.2f} s after it started"
