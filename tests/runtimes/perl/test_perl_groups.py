"""From recorded context-stack entries to Perl frames and runloop groups (no process needed)."""

from __future__ import annotations

from hotstack.runtimes.perl.frames import CXT_EVAL, CXT_SUB, RawContext, frames_of, vm_groups

LOOP, BLOCK, NULL = 5, 2, 0
EVALBLOCK = 0x40


def sub(cv, oldcop, retop=0x500):
    return RawContext(cv, oldcop, retop, CXT_SUB, 0)


def test_each_frame_is_at_the_statement_the_frame_above_left_from():
    # innermost first: a loop in `leaf`, leaf (called at cop 0x20), an eval block, mid (called at 0x10)
    contexts = [RawContext(0, 0x33, 0, LOOP, 0), sub(0xA, 0x20), RawContext(0, 0x21, 0x600, CXT_EVAL | EVALBLOCK, 0),
                RawContext(0, 0x22, 0, BLOCK, 0), sub(0xB, 0x10)]
    frames = frames_of(contexts, curcop=0x30, truncated=False)
    assert [(f.kind, f.cv, f.cop) for f in frames] == [("sub", 0xA, 0x30), ("eval", 0, 0x20), ("sub", 0xB, 0x21),
                                                      ("main", 0, 0x10)]
    assert [f.top for f in frames] == [False, False, False, True]


def test_a_cut_walk_has_no_main_frame():
    frames = frames_of([sub(0xA, 0x20)], curcop=0x30, truncated=True)
    assert [f.kind for f in frames] == ["sub"]


def test_groups_end_after_a_call_from_c_and_at_an_inner_runloops_stack():
    # comparator (called from C: retop 0) in a sort's own stack (its CXt_NULL bottom entry, then the
    # runlevel marker), under sorter; then a DESTROY-like call from C in the same stack as main
    contexts = [sub(0xC, 0x40, retop=0), RawContext(0, 0x41, 0, NULL, 0), RawContext(0, 0, 0, 0, 1),
                sub(0xD, 0x50, retop=0), sub(0xE, 0x10)]
    groups = vm_groups(frames_of(contexts, curcop=0x60, truncated=False))
    assert [[(f.kind, f.cv) for f in g] for g in groups] == [[("sub", 0xC)], [("sub", 0xD)],
                                                            [("sub", 0xE), ("main", 0)]]
    # the comparator's statement is the current one; sorter's is where the sort began
    assert groups[0][0].cop == 0x60 and groups[1][0].cop == 0x40


def test_a_frame_at_no_statement_of_its_own_has_no_line():
    """PL_curcop still the statement that entered the innermost frame (entersub pushed its context,
    its first nextstate to come; or popblock restored PL_curcop, the pop to come; or a sort between
    two calls of its comparator): the frame is at no statement (cop 0), not at the caller's line. The
    frames below keep theirs, and only the innermost frame is judged so (a recursive call's own
    entry further out is a real statement)."""
    contexts = [RawContext(0, 0x33, 0, LOOP, 0), sub(0xA, 0x20), sub(0xA, 0x20), sub(0xB, 0x10)]
    frames = frames_of(contexts, curcop=0x20, truncated=False)
    assert [(f.cv, f.cop) for f in frames] == [(0xA, 0), (0xA, 0x20), (0xB, 0x20), (0, 0x10)]
    # past its first statement, the innermost frame is at it
    assert frames_of(contexts, curcop=0x30, truncated=False)[0].cop == 0x30
    # the comparator of a sort (its own stack: runlevel marker) between two calls
    contexts = [sub(0xC, 0x40, retop=0), RawContext(0, 0x41, 0, NULL, 0), RawContext(0, 0, 0, 0, 1), sub(0xE, 0x10)]
    frames = frames_of(contexts, curcop=0x40, truncated=False)
    assert [(f.kind, f.cv, f.cop) for f in frames] == [("sub", 0xC, 0), ("runlevel", 0, 0), ("sub", 0xE, 0x40),
                                                      ("main", 0, 0x10)]
