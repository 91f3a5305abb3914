"""A kernel-unwound stack whose frames are all in files is one stack for every process of those
files (bpf/native_unwind.h, struct nu_stack): stored once with the addresses of the process that
stored it first, named with that process's mappings, each sample still counted under its own
process. A stack with a frame in no file (JIT code) stays its process's own."""

from __future__ import annotations

import time

import pytest

from hotstack.procs.maps import read_maps

from ..conftest import at_most
from .conftest import user_names

pytestmark = pytest.mark.root

CHAIN = ["main", "a", "b", "c"]


def _profile_raw(pids: list[int], steps, enough=lambda samples: True):
    """Sample `pids` (the kernel unwinder, 199 Hz) while `steps` run (callables, a second apart);
    returns the raw batch of one collect at the end and the samples of it and of the collects
    after it while `enough(samples)` is not (a count that does not depend on the CPU the
    workloads get on a busy machine)."""
    from hotstack.sampling import Engine, EngineConfig

    engine = Engine(EngineConfig(frequency=199, pids=tuple(pids), unwind="kernel", runtime_frames=False))
    batches = []
    real = engine.to_profile
    engine.to_profile = lambda sampler, batch: batches.append(batch) or real(sampler, batch)
    with engine:
        time.sleep(1.0)
        engine.collect()            # tables built, the first stores behind us
        for step in steps:
            step()
            time.sleep(1.0)
        batches.clear()
        samples = list(engine.collect()[0].samples)
        deadline = time.monotonic() + 90
        while not enough(samples) and time.monotonic() < deadline:
            time.sleep(0.5)
            samples += engine.collect()[0].samples
    return batches[0], samples


def _exe_start(pid: int, exe) -> int:
    return min(m.start for m in read_maps(pid) if m.path == str(exe))


def _complete(samples, pid: int) -> tuple[int, int]:
    """(samples of pid in c, those of them whole: from _start through main -> a -> b -> c)."""
    total = hit = 0
    for s in samples:
        if s.pid != pid:
            continue
        names = user_names(s)
        if names[-1:] != ["c"]:
            continue
        total += s.value
        hit += s.value if names[:1] == ["_start"] and any(names[i:i + 4] == CHAIN for i in range(len(names))) else 0
    return hit, total


ENOUGH = 100        # samples in c of each process: enough for a bound of a percent


def _enough(*pids: int):
    return lambda samples: all(_complete(samples, pid)[1] >= ENOUGH for pid in pids)


def _assert_whole(samples, pid: int) -> None:
    """Every stack of pid in c is whole: a rate of 1 in 100 short ones passes within three standard
    deviations."""
    hit, total = _complete(samples, pid)
    assert total >= ENOUGH, (pid, total)
    assert total - hit <= at_most(total, 0.01), (pid, hit, total,
                                                  [user_names(s) for s in samples if s.pid == pid][:5])


def test_processes_of_the_same_files_share_their_stacks(chain, workloads):
    one, two = workloads([chain, "busy"]), workloads([chain, "busy"])
    if _exe_start(one.pid, chain) == _exe_start(two.pid, chain):
        pytest.skip("no address space randomization: the two processes' addresses are the same")
    batch, samples = _profile_raw([one.pid, two.pid], [lambda: None] * 2, _enough(one.pid, two.pid))
    raws = [r for r in batch.stacks if r.pid in (one.pid, two.pid) and r.user_stack]
    shared = [r for r in raws if r.user_pid]
    assert shared, "no stack of one process was stored by the other"
    assert all(r.user_pid in (one.pid, two.pid) and r.user_pid != r.pid for r in shared)
    own = {(r.pid, r.user_stack) for r in raws if not r.user_pid}
    # a shared stack holds its owner's addresses: the owner's own samples of it point at the same
    assert all((r.user_pid, r.user_stack) in own for r in shared if any(o[0] == r.user_pid for o in own))
    for pid in (one.pid, two.pid):
        _assert_whole(samples, pid)


def test_an_owner_that_exited_still_names_the_stacks_it_stored(chain, workloads):
    """The first process to store a stack in an interval exits before the collect: the samples of
    the same stack from another process are named with the owner's mappings all the same."""
    first = workloads([chain, "busy"])
    later = []
    batch, samples = _profile_raw([], [lambda: later.append(workloads([chain, "busy"])), first.stop],
                                  lambda samples: _enough(later[0].pid)(samples))
    [second] = later
    owned_by_first = sum(r.value for r in batch.stacks if r.pid == second.pid and r.user_pid == first.pid)
    assert owned_by_first > 0, "the later process's samples did not share the first one's stacks"
    _assert_whole(samples, second.pid)


def test_a_stack_with_a_frame_in_no_file_stays_its_process_own(chain, workloads):
    """JIT code (anonymous executable memory) is no file: the stacks through it are keyed by address
    and process, never shared, and named with the sample's own process (its perf map, if any)."""
    one, two = workloads([chain, "jit"]), workloads([chain, "jit"])
    batch, _samples = _profile_raw([one.pid, two.pid], [lambda: None] * 2)
    files = {pid: [(m.start, m.end) for m in read_maps(pid) if m.is_file] for pid in (one.pid, two.pid)}

    def in_files(pid: int, stack) -> bool:
        return all(any(lo <= a < hi for lo, hi in files[pid]) for a in stack)

    raws = [r for r in batch.stacks if r.pid in files and r.user_stack]
    through_jit = [r for r in raws if not in_files(r.pid, r.user_stack)]
    assert sum(r.value for r in through_jit) >= 30, len(raws)
    assert not any(r.user_pid for r in through_jit)
    assert all(in_files(r.user_pid, r.user_stack) for r in raws if r.user_pid)
