"""A process's user stack met again (within KEEP_INTERVALS intervals) is named once: the sample
maker reuses the frames while the process and its mappings are the ones they were named with, and
never reuses a stack that holds a frame that may be named later ([unknown])."""

from __future__ import annotations

import subprocess
import time

import pytest

from hotstack.procs import ProcessTable
from hotstack.profile.model import UNKNOWN, Frame, FrameKind
from hotstack.sampling.buffers import RawStack
from hotstack.sampling.samples import KEEP_INTERVALS, RecentlyUsed, SampleMaker
from hotstack.symbols.symbolizer import Symbolizer


class CountingSymbolizer(Symbolizer):
    def __init__(self, processes):
        super().__init__(processes)
        self.calls = 0

    def final_user_frames(self, pid, addresses, info=None):
        self.calls += 1
        return super().final_user_frames(pid, addresses, info)


@pytest.fixture
def sleeper():
    p = subprocess.Popen(["sleep", "60"])
    time.sleep(0.2)
    yield p.pid
    p.kill()
    p.wait()


def _maker(pid):
    processes = ProcessTable()
    processes.observe(pid)
    symbolizer = CountingSymbolizer(processes)
    return SampleMaker(symbolizer, processes, []), symbolizer, processes


def _libc_addresses(processes, pid):
    info = processes.get(pid)
    libc = next(m for m in info.mappings.mappings if "libc.so" in m.path)
    return tuple(libc.start + 0x1000 + 64 * i for i in range(4))


def test_a_stack_met_again_is_named_once_across_intervals(sleeper):
    maker, symbolizer, processes = _maker(sleeper)
    raw = RawStack(sleeper, sleeper, "sleep", _libc_addresses(processes, sleeper), (), 1)
    first, _ = maker.sample(raw, strip_bpf=True)
    assert symbolizer.calls == 1 and first.stack and all(f.name != UNKNOWN for f in first.stack)
    again, _ = maker.sample(raw._replace(tid=sleeper + 1, value=3), strip_bpf=True)
    assert symbolizer.calls == 1 and again.stack == first.stack and again.value == 3
    for _ in range(KEEP_INTERVALS):
        maker.next_interval()
    maker.sample(raw, strip_bpf=True)       # last met KEEP_INTERVALS intervals ago: still reused
    assert symbolizer.calls == 1
    for _ in range(KEEP_INTERVALS + 1):
        maker.next_interval()               # KEEP_INTERVALS intervals without it: named again
    maker.sample(raw, strip_bpf=True)
    assert symbolizer.calls == 2
    assert symbolizer.stats.hits + symbolizer.stats.misses == 4 * len(raw.user_stack)


def test_recently_used_keeps_what_is_used_and_drops_the_least_recent():
    kept = RecentlyUsed(size=3, intervals=2)
    for key in "abc":
        kept.put(key, key.upper())
    assert kept.get("a") == "A"             # a is now the most recent
    kept.put("d", "D")                      # full: b, the least recently used, goes
    assert kept.get("b") is None and [kept.get(k) for k in "acd"] == ["A", "C", "D"]
    kept.next_interval()
    assert kept.get("c") == "C"             # used in the second interval
    kept.next_interval()
    kept.next_interval()                    # a and d: unused for two intervals
    assert kept.get("a") is None and kept.get("d") is None and kept.get("c") == "C" and len(kept) == 1


def test_a_process_read_again_has_its_stacks_named_again(sleeper):
    maker, symbolizer, processes = _maker(sleeper)
    raw = RawStack(sleeper, sleeper, "sleep", _libc_addresses(processes, sleeper), (), 1)
    maker.sample(raw, strip_bpf=True)
    processes.forget(sleeper)           # as after an exec: a new entry, maps read anew
    processes.observe(sleeper)
    maker.sample(raw, strip_bpf=True)
    assert symbolizer.calls == 2


def test_a_stack_with_an_unknown_frame_is_not_reused(sleeper):
    maker, symbolizer, processes = _maker(sleeper)
    raw = RawStack(sleeper, sleeper, "sleep", _libc_addresses(processes, sleeper) + (0x10,), (), 1)
    first, _ = maker.sample(raw, strip_bpf=True)
    assert first.stack[-1].name == UNKNOWN
    maker.sample(raw, strip_bpf=True)
    assert symbolizer.calls == 2


class _PythonLike:
    """A source with a final_merge: one named frame above the native ones, or an unnamed one."""

    def __init__(self, named):
        self.named = named
        self.merges = 0

    def final_merge(self, pid, key, native):
        self.merges += 1
        frame = Frame("handler", FrameKind.PYTHON) if self.named else Frame("[unknown python]", FrameKind.PYTHON,
                                                                            resolved=False)
        return [frame, *native], self.named


@pytest.mark.parametrize("named", [True, False])
def test_a_merged_stack_is_reused_only_when_its_source_named_every_frame(sleeper, named):
    processes = ProcessTable()
    processes.observe(sleeper)
    symbolizer = CountingSymbolizer(processes)
    source = _PythonLike(named)
    maker = SampleMaker(symbolizer, processes, [source])
    raw = RawStack(sleeper, sleeper, "sleep", _libc_addresses(processes, sleeper), (), 1, runtime_stack=7)
    first, _ = maker.sample(raw, strip_bpf=True)
    again, _ = maker.sample(raw, strip_bpf=True)
    assert first.stack[0].kind is FrameKind.PYTHON and again.stack == first.stack
    # the native frames are named once either way; the merge is done again when a frame was unnamed
    assert symbolizer.calls == 1
    assert source.merges == (1 if named else 2)


@pytest.fixture
def two_sleepers():
    """Two processes of the same files at other addresses, and a sample maker that counts its
    symbolizer's passes: (maker, symbolizer, processes, (pid, libc addresses) of each)."""
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        time.sleep(0.2)
        one, two = (p.pid for p in sleepers)
        processes = ProcessTable()
        for pid in (one, two):
            processes.observe(pid)
        symbolizer = CountingSymbolizer(processes)
        maker = SampleMaker(symbolizer, processes, [])
        yield (maker, symbolizer, processes, (one, _libc_addresses(processes, one)),
               (two, _libc_addresses(processes, two)))
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def test_a_stack_of_files_is_named_once_for_every_process_of_those_files(two_sleepers):
    """The kernel hashes a stack whose every frame is in a file by (file, file offset) per frame
    (RawStack.user_hash): the same stack in another process of the same files, at other addresses
    (a loop of short commands: a new process each run), is named once. A stack hashed otherwise is
    named per process."""
    maker, symbolizer, processes, (one, at_one), (two, at_two) = two_sleepers
    assert at_one != at_two          # (ASLR: the same offsets at other addresses)
    first, _ = maker.sample(RawStack(one, one, "sleep", at_one, (), 1, user_hash=0x5EED), strip_bpf=True)
    second, _ = maker.sample(RawStack(two, two, "sleep", at_two, (), 1, user_hash=0x5EED), strip_bpf=True)
    assert symbolizer.calls == 1 and second.stack == first.stack and second.pid == two
    maker.sample(RawStack(two, two, "sleep", at_two[:3] + (at_two[3] + 64,), (), 1), strip_bpf=True)
    assert symbolizer.calls == 2     # no file hash: named in its own process


def test_a_stack_new_only_by_its_leaf_is_named_from_its_callers_and_its_leaf_offset(two_sleepers):
    """A stack whose callers (every frame but the leaf, by the kernel's hash of them:
    RawStack.user_callers) were named before, in any process of those files, is named with no pass
    over its frames and no mappings of its process: its callers' frames, and its leaf from its file
    and file offset (a hot function's every instruction is a leaf in turn, in a short command's
    process that may be gone by then). Its frames are those its own process's mappings give; a leaf
    in a file no process's mapping named before, or callers of another depth, take the pass."""
    from hotstack.unwind.kernel_files import maps_dev

    maker, symbolizer, processes, (one, at_one), (two, at_two) = two_sleepers
    libc = processes.get(two).mappings.find(at_two[0])

    def leaf_of(address):
        return {"leaf_ino": libc.inode, "leaf_dev": maps_dev(libc.dev),
                "leaf_offset": address - libc.start + libc.offset}

    maker.sample(RawStack(one, one, "sleep", at_one, (), 1, user_hash=0x5EED, user_callers=0xCA11), strip_bpf=True)
    assert symbolizer.calls == 1
    moved = (at_two[0] + 16,) + at_two[1:]      # the same callers, another leaf, another process
    named, _ = maker.sample(RawStack(two, two, "sleep", moved, (), 1, user_hash=0x5EED + 1, user_callers=0xCA11,
                                     **leaf_of(moved[0])), strip_bpf=True)
    assert symbolizer.calls == 1
    reference = symbolizer.user_frames(two, list(moved))
    assert list(named.stack) == reference and named.stack[0].address == reference[0].address
    # (remembered by its own file hash too: met again, no leaf lookup)
    again, _ = maker.sample(RawStack(two, two, "sleep", moved, (), 1, user_hash=0x5EED + 1), strip_bpf=True)
    assert again.stack is named.stack
    shorter = moved[:3]
    maker.sample(RawStack(two, two, "sleep", shorter, (), 1, user_hash=0x5EED + 2, user_callers=0xCA11,
                          **leaf_of(shorter[0])), strip_bpf=True)
    assert symbolizer.calls == 2      # (callers of another depth: the pass)
    symbolizer._recent_files.clear()  # (no file named before: the pass)
    other = (at_two[0] + 32,) + at_two[1:]
    maker.sample(RawStack(two, two, "sleep", other, (), 1, user_hash=0x5EED + 3, user_callers=0xCA11,
                          **leaf_of(other[0])), strip_bpf=True)
    assert symbolizer.calls == 3


def test_a_remapped_process_never_names_a_changed_range_with_maps_that_do_not_fit(sleeper):
    """A process the kernel saw put another file in an address range, whose maps read since show no
    change (it changed them back before the read): a stack whose file hash fits none of the
    mappings userspace has keeps the frames of that range unnamed, and names the others."""
    maker, symbolizer, processes = _maker(sleeper)
    info = processes.get(sleeper)
    libc = next(m for m in info.mappings.mappings if "libc.so" in m.path)
    exe = next(m for m in info.mappings.mappings if "libc.so" not in m.path and "ld-linux" not in m.path)
    stack = _libc_addresses(processes, sleeper)[:2] + (exe.start + 0x100,)
    assert processes.reread(sleeper, (libc.start, libc.end))
    assert not info.earlier and info.remapped_at     # (the maps read again are the same)
    sample, _ = maker.sample(RawStack(sleeper, sleeper, "sleep", stack, (), 1, user_hash=0x5EED, user_end=1),
                             strip_bpf=True)
    names = [f.name for f in sample.stack]
    assert names[:2] == [UNKNOWN, UNKNOWN] and names[2] != UNKNOWN, names
    # a stack whose hash fits the maps is named in full
    from hotstack.unwind.kernel_files import file_stack_hash
    fits = file_stack_hash(info.mappings, stack, 1)
    sample, _ = maker.sample(RawStack(sleeper, sleeper, "sleep", stack, (), 1, user_hash=fits, user_end=1),
                             strip_bpf=True)
    assert all(f.name != UNKNOWN for f in sample.stack), [f.name for f in sample.stack]


def test_a_noted_process_named_with_kept_mappings_that_lost_one_is_told(sleeper):
    """A noted process (ProcessTable.note) gone before naming needed its mappings is named with the
    ones the kernel kept for it; where those lack a mapping a stack of files needed (every frame was
    in a file: it has a file hash), the table tells (take_holes), so that the engine reads that
    image's next processes. A stack with no file hash (a vDSO frame) tells nothing."""
    from hotstack.procs import Announced

    processes = ProcessTable()
    parent = processes.observe(sleeper)
    libc = next(m for m in parent.mappings.mappings if "libc.so" in m.path)
    others = [m for m in parent.mappings.mappings if m is not libc]
    gone_pid = 4_000_000        # (above any pid_max: no such process)
    told = Announced(start_time=1, comm="sleep", ppid=sleeper, mntns=parent.mntns, exe_ino=parent.image[1])
    processes.gone_mappings = lambda pid: others if pid == gone_pid else []
    maker = SampleMaker(Symbolizer(processes), processes, [])
    stack = _libc_addresses(processes, sleeper)
    for user_hash, told_hole in ((0, False), (0x5EED, True)):
        processes.note(gone_pid, told, parent)
        raw = RawStack(gone_pid, gone_pid, "sleep", stack, (), 1, user_hash=user_hash)
        sample, _ = maker.sample(raw, strip_bpf=True)
        assert sample.stack and all(f.name == UNKNOWN for f in sample.stack)
        assert processes.take_holes() == ({told} if told_hole else set()), user_hash
        processes.forget(gone_pid)
    processes.gone_mappings = lambda pid: [libc, *others] if pid == gone_pid else []
    processes.note(gone_pid, told, parent)
    sample, _ = maker.sample(RawStack(gone_pid, gone_pid, "sleep", stack, (), 1, user_hash=0x5EED + 1), strip_bpf=True)
    assert all(f.name != UNKNOWN for f in sample.stack) and not processes.take_holes()


@pytest.mark.parametrize("end, marked", [(1, False), (7, True), (3, True)])
def test_a_walk_ended_in_code_of_unknown_frame_is_shown_truncated(sleeper, end, marked):
    """A native walk that ended where no frame could be worked out (NU_END_INVALID, 7: code without
    CFI or frame pointer, unwind/code_rows.py) ends in a [truncated] frame and counts as truncated,
    as one cut at the frame limit (NU_END_TRUNCATED, 3) does; one that reached its root (1) not."""
    from hotstack.bpf import schema
    from hotstack.profile.model import TRUNCATED

    assert (schema.NU_END_ROOT, schema.NU_END_INVALID, schema.NU_END_TRUNCATED) == (1, 7, 3)
    maker, _symbolizer, processes = _maker(sleeper)
    stack = _libc_addresses(processes, sleeper)[:2]
    sample, _ = maker.sample(RawStack(sleeper, sleeper, "sleep", stack, (), 1, user_end=end), strip_bpf=True)
    assert (sample.stack[-1] is TRUNCATED) == marked, [f.name for f in sample.stack]
