"""The native frames below a Java thread's entry (JavaCalls::call_helper ... start_thread), which the kernel
walker keeps per thread (bpf/hotspot.h, hs_tails) and takes from there while the stack below the call stub
holds the same bytes: every sample must show the frames a walk through the unwind tables finds."""

from __future__ import annotations

import struct
import time
from collections import Counter

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from .test_hotspot import _start, classes  # noqa: F401 (classes: the fixture)

pytestmark = pytest.mark.root

# struct hs_tail in bpf/hotspot.h: mm, bp, pc, hash (u64), span, n (u32), pcs
_TAIL = struct.Struct("<QQQQII")


def _below_java(sample) -> tuple[str, ...]:
    """The frames on the root side of the sample's outermost Java frame, root last."""
    kinds = [f.kind for f in sample.stack]
    last = max(i for i, k in enumerate(kinds) if k is FrameKind.JAVA)
    return tuple(f.name for f in sample.stack[last + 1:])


def test_cached_native_tail_is_the_thread_start(classes):
    proc = _start(classes, 30, threads=2)
    try:
        time.sleep(1.0)
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,), unwind="kernel")) as prof:
            time.sleep(0.5)
            prof.collect()
            time.sleep(2.5)
            samples = prof.collect()[0].samples
            cached = {struct.unpack("<I", k)[0]: _TAIL.unpack_from(v)
                      for k, v in prof.cpu.collection.maps["hs_tails"].items()}
    finally:
        proc.kill()
        proc.wait()
    java = [s for s in samples if any(f.kind is FrameKind.JAVA for f in s.stack)]
    assert sum(s.value for s in java) >= 200, len(samples)
    below = Counter()
    for s in java:
        below[_below_java(s)] += s.value
    chain, count = below.most_common(1)[0]
    # HotWork's threads: the call stub, then libjvm's thread start, then libc's
    assert chain[0].startswith("[jvm] StubRoutines"), chain
    assert chain[1].startswith("JavaCalls::call_helper"), chain
    assert chain[-2:] == ("start_thread", "__clone3"), chain
    # every walk of the hot threads that reached the thread's root found that chain (a stale or mistaken
    # cache entry would show another); walks that ended early (a read or frame-pointer step failed) are few
    hot = [s for s in java if any(f.name.startswith("HotWork.") for f in s.stack if f.kind is FrameKind.JAVA)]
    tails = Counter()
    for s in hot:
        tails[_below_java(s)] += s.value
    wrong = {k: v for k, v in tails.items() if k != chain and k[-1:] == ("__clone3",)}
    assert not wrong, wrong
    assert tails[chain] >= 0.95 * sum(tails.values()), tails
    # ... and it came from the cache: each hot thread has an entry for its call stub with the frames below it
    for tid in {s.tid for s in hot}:
        assert tid in cached, (tid, sorted(cached))
        assert cached[tid][5] == len(chain) - 1, (cached[tid], chain)
