"""Trace/span correlation: samples of a thread that OBI's pinned map names carry its trace_id/span_id."""

from __future__ import annotations

import logging
import time

import pytest

from hotstack.sampling.obi import ObiConfig

from .conftest import libc_path_of, offcpu_engine, probe_engine, thread_ids

pytestmark = pytest.mark.root

TRACE = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
SPAN = bytes.fromhex("00f067aa0ba902b7")


def _labels_by_pid(profile):
    out = {}
    for s in profile.samples:
        out.setdefault(s.pid, set()).add((s.label("trace_id"), s.label("span_id")))
    return out


def test_probe_samples_carry_the_span_of_their_thread(workloads, malloc_ratio, obi_map):
    root, set_span = obi_map
    traced = workloads([malloc_ratio, "5"])
    other = workloads([malloc_ratio, "5"])
    set_span(traced.pid, traced.pid, TRACE, SPAN)
    libc = libc_path_of(traced.pid)
    config = dict(links=[f"uprobe:{libc}:malloc"], pids=[traced.pid, other.pid], obi=ObiConfig(bpf_fs_root=root))
    with probe_engine(**config) as profiler:
        profile = profiler.run(1.0)
    labels = _labels_by_pid(profile)
    assert labels[traced.pid] == {(TRACE.hex(), SPAN.hex())}
    assert labels[other.pid] == {("", "")}


def test_offcpu_samples_carry_the_span_they_waited_in(workloads, offcpu_split, obi_map):
    root, set_span = obi_map
    w = workloads([offcpu_split])
    helper_pid = int(open(f"/proc/{w.pid}/task/{w.pid}/children").read().split()[0])
    set_span(w.pid, w.pid, TRACE, SPAN)
    config = dict(pids=(w.pid, helper_pid), obi=ObiConfig(bpf_fs_root=root))
    with offcpu_engine(**config) as profiler:
        profile = profiler.run(1.0)
    main = [s for s in profile.samples if s.tid == w.pid]
    helper = [s for s in profile.samples if s.pid == helper_pid]
    assert main and helper
    assert {(s.label("trace_id"), s.label("span_id")) for s in main} == {(TRACE.hex(), SPAN.hex())}
    assert all(not s.label("trace_id") for s in helper)


def test_absent_map_is_off_with_one_info_line(workloads, malloc_ratio, tmp_path, caplog):
    w = workloads([malloc_ratio, "5"])
    libc = libc_path_of(w.pid)
    config = dict(links=[f"uprobe:{libc}:malloc"], pids=[w.pid], obi=ObiConfig(bpf_fs_root=str(tmp_path)))
    with caplog.at_level(logging.INFO, logger="hotstack.obi"):
        with probe_engine(**config) as profiler:
            profile = profiler.run(0.5)
    assert profile.samples and all(not s.label("trace_id") for s in profile.samples)
    lines = [r.getMessage() for r in caplog.records if r.name == "hotstack.obi"]
    assert len(lines) == 1 and "correlation off" in lines[0] and "traces_ctx_v1" in lines[0], lines


@pytest.mark.shares
def test_cpu_samples_of_the_traced_thread_carry_its_span(workloads, two_spinners, obi_map):
    """The case OBI exists for: a busy thread serving a request; its CPU samples name the span."""
    from hotstack.sampling import Engine, EngineConfig

    root, set_span = obi_map
    w = workloads([two_spinners])
    for _ in range(50):
        tids = thread_ids(w.pid)
        if len(tids) == 2:
            break
        time.sleep(0.02)
    traced, untraced = tids
    set_span(w.pid, traced, TRACE, SPAN)
    config = EngineConfig(frequency=499, pids=(w.pid,), obi=ObiConfig(bpf_fs_root=root))
    with Engine(config) as profiler:
        profile = profiler.run(1.5)
    by_tid = {}
    for s in profile.samples:
        by_tid.setdefault(s.tid, {}).setdefault((s.label("trace_id"), s.label("span_id")), 0)
        by_tid[s.tid][(s.label("trace_id"), s.label("span_id"))] += s.value
    assert set(by_tid[traced]) == {(TRACE.hex(), SPAN.hex())}, by_tid
    assert set(by_tid[untraced]) == {("", "")}, by_tid
    assert sum(by_tid[traced].values()) > 20 and sum(by_tid[untraced].values()) > 20, by_tid
