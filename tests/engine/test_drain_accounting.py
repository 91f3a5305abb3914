"""Every sample the BPF program counts is read exactly once, across many drains."""

from __future__ import annotations

import time

import pytest

from hotstack.sampling.config import EngineConfig
from hotstack.sampling.cpu import CpuSampler

pytestmark = pytest.mark.root


def test_no_sample_lost_or_double_counted(hot_ab, workloads):
    busy = [workloads([hot_ab]) for _ in range(2)]
    drained = 0
    seen = idle = filtered = full = 0
    session = CpuSampler(EngineConfig(frequency=499, unwind="fp"))
    session.start()
    session.attach()
    try:
        # at least 3 s of many short intervals, and on until 1000 samples were seen (two busy CPUs
        # at 499 Hz give them in 1 s; a busy machine's other processes are sampled as well)
        began = time.monotonic()
        while time.monotonic() < began + 3 or (seen <= 1000 and time.monotonic() < began + 120):
            time.sleep(0.05)   # many short intervals: flips race with samples in flight
            batch = session.collect()
            drained += sum(s.value for s in batch.stacks)
            seen, idle, filtered, full = (seen + batch.stats.samples, idle + batch.stats.idle,
                                          filtered + batch.stats.filtered, full + batch.stats.counts_full)
        session.stop()   # no more samples: the last drain sees everything
        batch = session.collect()
        drained += sum(s.value for s in batch.stacks)
        seen, idle, filtered, full = (seen + batch.stats.samples, idle + batch.stats.idle,
                                      filtered + batch.stats.filtered, full + batch.stats.counts_full)
    finally:
        session.close()
    assert seen > 1000, seen
    assert full == 0
    assert drained == seen - idle - filtered, (drained, seen, idle, filtered)
    assert all(w.proc.poll() is None for w in busy)
