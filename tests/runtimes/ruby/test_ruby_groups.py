"""How recorded control frames split into VM entries and land on the native stack (no process needed)."""

from __future__ import annotations

from hotstack.profile.model import Frame, FrameKind
from hotstack.runtimes.common.merge import merge
from hotstack.runtimes.ruby.frames import (FLAG_FINISH, FRAME_BLOCK, FRAME_CFUNC, FRAME_DUMMY, FRAME_METHOD,
                                         FRAME_TOP, RawRubyFrame, vm_groups)
from hotstack.runtimes.ruby.source import is_vm_entry


def raw(magic: int, finish: bool = False, iseq: int = 0x1000, pc: int = 0x2000) -> RawRubyFrame:
    if magic == FRAME_CFUNC:
        iseq = pc = 0
    return RawRubyFrame(iseq, pc, 0x3000, magic | (FLAG_FINISH if finish else 0))


def test_groups_end_after_each_finish_frame_and_skip_frames_without_code():
    # leaf first: times (C) <- hot (method) <- block (entered from C: FINISH) <- dummy <- each (C) <- main (FINISH)
    frames = [raw(FRAME_CFUNC), raw(FRAME_METHOD), raw(FRAME_BLOCK, finish=True),
              raw(FRAME_DUMMY, iseq=0, pc=0), raw(FRAME_CFUNC), raw(FRAME_TOP, finish=True)]
    groups = vm_groups(frames)
    assert [[f.magic for f in g] for g in groups] == [[FRAME_CFUNC, FRAME_METHOD, FRAME_BLOCK],
                                                      [FRAME_CFUNC, FRAME_TOP]]


def test_each_vm_entry_frame_is_replaced_by_its_group_in_order():
    n = lambda name: Frame(name, FrameKind.NATIVE)   # noqa: E731
    r = lambda name: Frame(name, FrameKind.RUBY)     # noqa: E731
    native = [n("int_dotimes"), n("vm_exec_core"), n("rb_vm_exec"), n("rb_yield"), n("rb_vm_exec"), n("main"),
              n("__libc_start_main")]
    out = merge(native, [[r("times"), r("hot"), r("block in run")], [r("each"), r("<main>")]],
                is_anchor=is_vm_entry)
    assert [f.name for f in out] == ["int_dotimes", "vm_exec_core", "times", "hot", "block in run", "rb_yield",
                                     "each", "<main>", "main", "__libc_start_main"]
