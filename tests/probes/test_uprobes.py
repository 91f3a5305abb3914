"""uprobe/uretprobe links on this machine's libc malloc, against a workload with a known call ratio."""

from __future__ import annotations

import pytest

from ..stack_totals import totals_by_name
from .conftest import libc_path_of, probe_engine, stack_names

pytestmark = pytest.mark.root


CALLERS = ("alloc_three", "alloc_one")     # malloc's callers, 3 calls to 1


def _malloc_probed(workloads, malloc_ratio, link: str, seconds: float, at_least: int, within: float):
    """The workload (pid) and a profile of `seconds` of the probe `link` ("uprobe" or "uretprobe",
    with its symbol) on its libc's malloc, once checked: more than `at_least` hits in the workload,
    alloc_three's share of them 0.75 within `within`."""
    w = workloads([malloc_ratio, "20"])
    kind, symbol = link.split(":")
    with probe_engine([f"{kind}:{libc_path_of(w.pid)}:{symbol}"]) as profiler:
        profile = profiler.run(seconds)
    counts = totals_by_name(((stack_names(s), s.value) for s in profile.samples if s.pid == w.pid), CALLERS)
    total = sum(counts.values())
    assert total > at_least, counts
    assert abs(counts["alloc_three"] / total - 0.75) < within, counts
    return w.pid, profile


@pytest.mark.shares
def test_uprobe_on_malloc_shows_callers_and_their_ratio(workloads, malloc_ratio):
    # ~20 calls per ms for ~2 s: thousands of hits, each one counted (not sampled).
    pid, profile = _malloc_probed(workloads, malloc_ratio, "uprobe:malloc", 2.0, at_least=5000, within=0.02)
    assert profile.name == "process_cpu"
    assert (profile.sample_type.type, profile.sample_type.unit) == ("uprobe", "count")
    assert profile.period == 1
    # The stack is malloc's, from its caller up to main: the caller right above malloc.
    ours = [s for s in profile.samples if s.pid == pid and "alloc_three" in stack_names(s)]
    names = stack_names(max(ours, key=lambda s: s.value))
    leaf = names[0]
    assert "malloc" in leaf, names
    assert names[1] == "alloc_three" and "main" in names[2:], names
    assert all(not f.is_kernel for s in ours for f in s.stack), "uprobes carry no kernel stack"


def test_uprobe_hits_every_process_using_the_library_and_pid_filter(workloads, malloc_ratio):
    a = workloads([malloc_ratio, "5"])
    b = workloads([malloc_ratio, "5"])
    libc = libc_path_of(a.pid)
    with probe_engine([f"uprobe:{libc}:malloc"]) as profiler:
        everyone = profiler.run(1.0)
    pids = {s.pid for s in everyone.samples if "alloc_three" in stack_names(s)}
    assert {a.pid, b.pid} <= pids
    with probe_engine([f"uprobe:{libc}:malloc"], pids=[b.pid]) as profiler:
        only_b = profiler.run(1.0)
    assert only_b.samples and {s.pid for s in only_b.samples} == {b.pid}
    assert only_b.stats.filtered > 0


@pytest.mark.shares
def test_uretprobe_stack_starts_at_the_caller(workloads, malloc_ratio):
    pid, profile = _malloc_probed(workloads, malloc_ratio, "uretprobe:malloc@@GLIBC_2.2.5", 1.5,
                                  at_least=3000, within=0.03)
    ours = [s for s in profile.samples if s.pid == pid and "alloc_one" in stack_names(s)]
    # At a return the program counter is back in the caller: it is the leaf.
    assert stack_names(max(ours, key=lambda s: s.value))[0] == "alloc_one"
