"""uprobe/uretprobe links on this machine's libc malloc, against a workload with a known call ratio."""

from __future__ import annotations

import pytest


from .conftest import libc_path_of, probe_engine, stack_names

pytestmark = pytest.mark.root


def _per_caller(profile, pid: int) -> dict[str, int]:
    counts = {"alloc_three": 0, "alloc_one": 0}
    for s in profile.samples:
        if s.pid != pid:
            continue
        names = stack_names(s)
        for caller in counts:
            if caller in names:
                counts[caller] += s.value
    return counts


@pytest.mark.shares
def test_uprobe_on_malloc_shows_callers_and_their_ratio(workloads, malloc_ratio):
    w = workloads([malloc_ratio, "20"])
    libc = libc_path_of(w.pid)
    with probe_engine([f"uprobe:{libc}:malloc"]) as profiler:
        profile = profiler.run(2.0)
    assert profile.name == "process_cpu"
    assert (profile.sample_type.type, profile.sample_type.unit) == ("uprobe", "count")
    assert profile.period == 1
    counts = _per_caller(profile, w.pid)
    total = counts["alloc_three"] + counts["alloc_one"]
    # ~20 calls per ms for ~2 s: thousands of hits, each one counted (not sampled).
    assert total > 5000, counts
    assert abs(counts["alloc_three"] / total - 0.75) < 0.02, counts
    # The stack is malloc's, from its caller up to main: the caller right above malloc.
    ours = [s for s in profile.samples if s.pid == w.pid and "alloc_three" in stack_names(s)]
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
    w = workloads([malloc_ratio, "20"])
    libc = libc_path_of(w.pid)
    with probe_engine([f"uretprobe:{libc}:malloc@@GLIBC_2.2.5"]) as profiler:
        profile = profiler.run(1.5)
    counts = _per_caller(profile, w.pid)
    total = sum(counts.values())
    assert total > 3000, counts
    assert abs(counts["alloc_three"] / total - 0.75) < 0.03, counts
    ours = [s for s in profile.samples if s.pid == w.pid and "alloc_one" in stack_names(s)]
    # At a return the program counter is back in the caller: it is the leaf.
    assert stack_names(max(ours, key=lambda s: s.value))[0] == "alloc_one"
