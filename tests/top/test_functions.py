"""The pure parts of top: self/total counts, the sliding window, hotstack's own samples folded."""

from __future__ import annotations

from hotstack.profile.functions import function_counts
from hotstack.profile.model import Frame, FrameKind, Profile, Sample
from hotstack.profile.transforms import OWN_FRAME, fold_own
from hotstack.top.window import Window

spin, outer, main = Frame("spin", module="/bin/busy"), Frame("outer", module="/bin/busy"), Frame("main", module="/bin/busy")
k = Frame("do_syscall_64", FrameKind.KERNEL, "[kernel.kallsyms]")


def test_self_and_total_counts_recursion_once():
    samples = [Sample((spin, outer, main), 30, 1, 1, "busy"), Sample((k, outer, outer, main), 10, 1, 1, "busy"),
               Sample((), 5, 2, 2, "idle")]
    c = function_counts(samples)
    by = {r.key.name: r for r in c.rows.values()}
    assert c.samples == 45
    assert (by["spin"].self_samples, by["spin"].total_samples) == (30, 30)
    assert (by["outer"].self_samples, by["outer"].total_samples) == (0, 40)   # recursion counted once
    assert (by["do_syscall_64"].key.module, by["do_syscall_64"].key.kernel) == ("[kernel]", True)
    assert by["[no stack]"].self_samples == 5
    assert [r.key.name for r in c.top("self")][:2] == ["spin", "do_syscall_64"]
    assert [r.key.name for r in c.top("total")][:2] == ["main", "outer"]
    assert [r.key.name for r in c.top("self", "OUT")] == ["outer"]
    assert [r.key.name for r in c.top("self", "busy")] == ["spin", "main", "outer"]   # module matches too


def test_window_drops_old_intervals():
    w = Window(2.0)
    for i in range(5):
        w.add(Profile([Sample((spin if i < 3 else outer,), 10, 1, 1, "b")], i * 10**9, 10**9, 99))
    names = {r.key.name: r.self_samples for r in w.sum.rows.values()}
    assert names == {"outer": 20} and w.sum.samples == 20 and w.covered_s == 2.0
    cumulative = Window(0)
    for i in range(5):
        cumulative.add(Profile([Sample((spin,), 10, 1, 1, "b")], i * 10**9, 10**9, 99))
    assert cumulative.sum.samples == 50 and cumulative.covered_s == 5.0


def test_fold_own_keeps_values_and_threads():
    samples = [Sample((spin, main), 7, 100, 101, "hotstack"), Sample((outer,), 3, 200, 200, "busy")]
    profile = Profile(samples, 0, 10**9, 49)
    folded = fold_own(profile, {100}).samples
    assert folded[0].stack == (OWN_FRAME,) and (folded[0].value, folded[0].tid) == (7, 101)
    assert folded[1] is samples[1] and profile.samples[0].stack == (spin, main)   # the input is not changed
    assert fold_own(profile, ()) is profile
