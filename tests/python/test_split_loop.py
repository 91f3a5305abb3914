"""A CPython whose evaluation loop GCC split in two (Debian unstable's stripped 3.14 and 3.15: a
small _PyEval_EvalFrameDefault, most of its handlers in a .cold part no symbol names), profiled: a
leaf anywhere in the loop is recorded as the loop's first address (bpf/native_unwind.h, leaf_start
and leaf_part_start), so the hot Python functions' samples make one native stack, not one per
instruction of the split part, and their names and shares are those of the workload."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from hotstack.profile.model import FrameKind
from hotstack.runtimes.python.detect import detect
from hotstack.sampling import Engine, EngineConfig

from pyframes_helpers import Target, debian_unstable
from tests.runtimes.matrix import INSIDE

pytestmark = pytest.mark.root

SPLIT = debian_unstable()

# the runtime matrix's workload (tests/runtimes/matrix_workloads/work.py, copied into the root by
# matrix.extracted): hot_a and hot_b called 3:1 by work
WORK = ("import json, runpy; print(json.dumps({}), flush=True); "
        f"runpy.run_path('{INSIDE}/work.py', run_name='__main__')")


def _python_names(sample) -> list[str]:
    return [f.name for f in reversed(sample.stack) if f.kind is FrameKind.PYTHON]


def _hot(samples) -> Counter:
    hot = Counter()
    for s in samples:
        names = _python_names(s)
        if names[-1:] in (["hot_a"], ["hot_b"]):
            assert names[-2:-1] == ["work"], names
            hot[names[-1]] += s.value
    return hot


def _profile(pid: int, loop: list[tuple[int, int]]):
    """(raw stacks, samples) of `pid` until 400 samples of hot_a/hot_b and 150 with their leaf in
    the loop, or 30 s (a loaded machine gives the workload a fraction of a CPU)."""
    raws, samples = [], []
    with Engine(EngineConfig(frequency=499, pids=(pid,), unwind="kernel")) as prof:
        to_profile = prof.to_profile

        def keep(sampler, batch):
            raws.extend(batch.stacks)
            return to_profile(sampler, batch)

        prof.to_profile = keep
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (sum(_hot(samples).values()) < 400
                                               or sum(r.value for r in _leaf_in(raws, loop)) < 150):
            time.sleep(0.5)
            samples.extend(s for s in prof.collect()[0].samples if s.pid == pid)
    return raws, samples


def _leaf_in(raws, loop: list[tuple[int, int]]):
    return [r for r in raws if r.user_stack and any(lo <= r.user_stack[0] < hi for lo, hi in loop)]


@pytest.mark.skipif(not SPLIT, reason="no Debian unstable root (or not root)")
@pytest.mark.parametrize("interpreter", [p for _, p in SPLIT], ids=[i for i, _ in SPLIT])
def test_a_split_loop_makes_one_native_leaf_per_python_stack(interpreter):
    t = Target(interpreter, WORK)
    try:
        found = detect(t.pid)
        assert found is not None and found.eval_loop[0], f"{interpreter}: no evaluation loop found"
        assert found.eval_part[1], f"{interpreter}: its loop is not split (what this test is about)"
        loop = [found.eval_loop, found.eval_part]
        raws, samples = _profile(t.pid, loop)
    finally:
        t.stop()
    in_loop = _leaf_in(raws, loop)
    in_part = sum(r.value for r in _leaf_in(raws, [found.eval_part]))
    assert sum(r.value for r in in_loop) >= 150, f"{len(raws)} stacks, {len(in_loop)} with their leaf in the loop"
    # every leaf of the loop, in its named part or in the split one, recorded as its first address
    # (a walk that knew the named part only left 40-50% of the samples with their own leaf address)
    assert in_part == 0, f"{in_part} samples with their leaf recorded in the split part"
    assert {r.user_stack[0] for r in in_loop} == {found.eval_loop[0]}
    # one native stack per kernel stack, not one per instruction (67-81 here with the named part alone)
    distinct = len({r.user_stack for r in in_loop})
    assert distinct <= 4, f"{distinct} distinct native stacks with their leaf in the loop"
    # names and shares: work -> hot_a / hot_b, 75/25
    hot = _hot(samples)
    both = sum(hot.values())
    assert both >= 300, f"only {both} samples in hot_a/hot_b"
    assert abs(100 * hot["hot_a"] / both - 75) <= 5, hot
    # no frame of the loop left: each is replaced by the Python frames it ran
    start, size = found.binary.eval_loop
    parts = [(start, start + size), *found.binary.eval_parts]      # (ELF addresses, as frames have)
    left = [f for s in samples for f in s.stack if f.kind is FrameKind.NATIVE
            and f.module.endswith(interpreter.rsplit(":", 1)[-1]) and any(lo <= f.address < hi for lo, hi in parts)]
    assert not left, left[:3]
