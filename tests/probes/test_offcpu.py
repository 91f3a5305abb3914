"""Off-CPU profiles: time off the CPU per stack, from the sched_switch BTF tracepoint."""

from __future__ import annotations

import pytest

from hotstack.sampling import EngineConfig

from ..stack_totals import totals_by_name
from .conftest import offcpu_engine, stack_names

pytestmark = pytest.mark.root


def _by_function(profiles, tid: int, functions: tuple[str, ...]) -> dict[str, int]:
    """Thread `tid`'s total per function of `functions` (anywhere in its stacks)."""
    return totals_by_name(((stack_names(s), s.value) for p in profiles for s in p.samples if s.tid == tid), functions)


@pytest.mark.shares
def test_sleep_and_pipe_shares(workloads, offcpu_split):
    w = workloads([offcpu_split])
    with offcpu_engine() as profiler:
        profile = profiler.run(3.0)
    assert profile.name == "offcpu"
    assert (profile.sample_type.type, profile.sample_type.unit) == ("offcpu", "nanoseconds")
    assert (profile.period_type.type, profile.period_type.unit) == ("", "")
    totals = _by_function([profile], w.pid, ("sleep_eight_ms", "wait_on_pipe"))
    both = sum(totals.values())
    # The main thread is off the CPU nearly all of the 3 s.
    assert both > 2.0e9, totals
    share = totals["sleep_eight_ms"] / both
    assert abs(share - 0.80) <= 0.07, totals
    # Where it waited, in the kernel too: the sleep under nanosleep, the pipe under read.
    sleeps = [s for s in profile.samples if s.tid == w.pid and "sleep_eight_ms" in stack_names(s)]
    kernel = {f.name for s in sleeps for f in s.stack if f.is_kernel}
    assert "schedule" in kernel or "__schedule" in kernel, kernel


@pytest.mark.shares
def test_threshold_records_a_fraction_with_the_same_shares(workloads, offcpu_split):
    w = workloads([offcpu_split])
    with offcpu_engine(threshold=0.5, pids=(w.pid,)) as profiler:
        profile = profiler.run(3.0)
    totals = _by_function([profile], w.pid, ("sleep_eight_ms", "wait_on_pipe"))
    both = sum(totals.values())
    assert 0.5e9 < both < 2.5e9, totals          # about half of ~3 s
    assert abs(totals["sleep_eight_ms"] / both - 0.80) <= 0.10, totals
    assert {s.pid for s in profile.samples} == {w.pid}


def test_sleeps_longer_than_the_interval_keep_their_stacks(workloads, long_sleep):
    """A thread that leaves the CPU in one interval and returns in a later one is still named."""
    w = workloads([long_sleep])
    profiles = []
    with offcpu_engine(pids=(w.pid,)) as profiler:
        profiler.run(2.0, interval_s=0.1, on_profile=profiles.append)
    assert len(profiles) >= 10
    mine = [s for p in profiles for s in p.samples if s.tid == w.pid]
    named = sum(s.value for s in mine if "sleep_long" in stack_names(s))
    lost = sum(s.value for s in mine if "[lost user stack]" in stack_names(s))
    assert named > 1.0e9 and lost == 0, (named, lost)


def test_threshold_out_of_range():
    from hotstack.errors import ConfigError
    for bad in (0, -0.1, 1.5):
        with pytest.raises(ConfigError):
            EngineConfig(cpu=False, off_cpu_threshold=bad).validate()
