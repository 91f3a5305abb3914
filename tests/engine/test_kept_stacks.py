"""Kernel stacks an interval counted stay in the buffer's stack-trace map for its next interval
(sampling/buffers.py KeptStacks): read once, the same stacks as the map holds, and every other
stack deleted, those no count named at the periodic full clear."""

from __future__ import annotations

import shutil
import struct
import subprocess
import time

import pytest

from hotstack import ebpf
from hotstack.bpf import schema
from hotstack.sampling import buffers
from hotstack.sampling.config import EngineConfig
from hotstack.sampling.cpu import CpuSampler

pytestmark = pytest.mark.root


def _kernel_map(session: CpuSampler, buffer: int) -> ebpf.Map:
    return session.collection.maps[schema.buffered("kern_stacks", buffer)]


def _ids(m: ebpf.Map) -> set[int]:
    return {struct.unpack("<I", k)[0] for k in m.keys()}


@pytest.fixture()
def syscalls():
    """dd copying one byte at a time: most of its samples are in the kernel, in a few paths."""
    dd = shutil.which("dd")
    if dd is None:
        pytest.skip("no dd")
    proc = subprocess.Popen([dd, "if=/dev/zero", "of=/dev/null", "bs=1"], stderr=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait()


def test_counted_kernel_stacks_are_read_once_and_stay_right(syscalls, monkeypatch):
    lookups: list[bytes] = []
    real_lookup = ebpf.Map.lookup

    def counted_lookup(self, key):
        if any(self is _kernel_map(session, b) for b in (0, 1)):
            lookups.append(key)
        return real_lookup(self, key)

    monkeypatch.setattr(ebpf.Map, "lookup", counted_lookup)
    session = CpuSampler(EngineConfig(frequency=499, unwind="kernel"))
    session.start()
    session.attach()
    try:
        time.sleep(1.0)
        session.collect()               # buffer 0
        time.sleep(1.0)
        session.collect()               # buffer 1
        kept = session.buffers._kept[0]["kernel"]
        before = dict(kept.stacks)
        assert before, "no kernel stack counted from dd's system calls"
        time.sleep(1.0)
        lookups.clear()
        batch = session.collect()       # buffer 0 again: its last interval's stacks are known
        ids = {s.kernel_stack for s in batch.stacks if s.kernel_stack}
        counted_again = [i for i, stack in before.items() if stack in ids]
        assert counted_again, "no kernel stack of dd's recurred in the buffer's next interval"
        # every stack counted, and only those not known before, read from the map
        assert len(lookups) == len(kept.stacks) - len(counted_again), (len(lookups), len(kept.stacks))
        # what is kept is what the map holds under those ids, and nothing else is left there
        m = _kernel_map(session, 0)
        assert _ids(m) == set(kept.stacks), (_ids(m) ^ set(kept.stacks))
        for i, stack in kept.stacks.items():
            assert buffers.parse_stack(m.lookup(struct.pack("<I", i))) == stack

        # a stack left in the map that no count named (as the kernel leaves one for a count it
        # could not store) goes at the full clear; stacks no longer counted go at once
        orphan = next(iter(kept.stacks))
        del kept.stacks[orphan]
        session.stop()
        session.collect()               # buffer 1 (what was counted before the stop)
        kept.clears = buffers.FULL_CLEAR_EVERY * 5 - 2
        session.collect()               # buffer 0, nothing counted, not a full clear: the orphan stays
        assert _ids(_kernel_map(session, 0)) == {orphan}
        session.collect()               # buffer 1, nothing counted: its kept stacks go
        assert _ids(_kernel_map(session, 1)) == set()
        session.collect()               # buffer 0, its full clear
        assert _ids(_kernel_map(session, 0)) == set()
    finally:
        session.close()
