"""JIT code in native stacks (runtimes/common/jit.py, shared with PHP): which mappings hold JIT code, and
where interpreter frames go when the native stack runs through it (no process needed)."""

from __future__ import annotations

from hotstack.procs.maps import parse_maps
from hotstack.profile.model import UNKNOWN, Frame, FrameKind
from hotstack.runtimes.common.jit import jit_regions, merge_jit

MAPS = """\
55e000000000-55e000100000 r-xp 00001000 fe:00 123  /usr/bin/php8.2
5565a7a00000-5565afa00000 rw-s 00000000 00:01 1042  /dev/zero (deleted)
5565afa00000-5565b3a00000 r-xs 08000000 00:01 1042  /dev/zero (deleted)
7fb92786c000-7fb93786c000 r-xp 00000000 00:00 0
7f0000000000-7f0000100000 r-xp 00000000 fe:00 456  /usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2
7fb9277c1000-7fb9277c3000 r-xp 00000000 00:00 0  [vdso]
"""


def test_regions_are_anonymous_executable_memory():
    regions = jit_regions(parse_maps(MAPS))
    assert [(hex(m.start), m.path) for m in regions] == [("0x5565afa00000", "/dev/zero (deleted)"),
                                                        ("0x7fb92786c000", "")]


def test_stack_through_jit_code_is_cut_at_it():
    regions = jit_regions(parse_maps(MAPS))
    marker = Frame("[ruby jit]", FrameKind.JIT, resolved=False)
    groups = [[Frame("Process.clock_gettime", FrameKind.RUBY), Frame("Spinner#spin", FrameKind.RUBY)],
              [Frame("Integer#times", FrameKind.RUBY), Frame("<main>", FrameKind.RUBY)]]
    native = [Frame("__clock_gettime"), Frame("rb_clock_gettime"),
              Frame(UNKNOWN, address=0x7fb92786c100, resolved=False),        # YJIT code
              Frame("rb_yield"), Frame("int_dotimes"),                        # between the groups: unplaceable
              Frame(UNKNOWN, address=0x7fb92786c200, resolved=False), Frame("rb_vm_exec"), Frame("main")]
    out = merge_jit(native, groups, False, regions, marker)
    assert [f.name for f in out] == ["__clock_gettime", "rb_clock_gettime", "[ruby jit]", "Process.clock_gettime",
                                     "Spinner#spin", "Integer#times", "<main>"]
    # a shared mapping's frame carries its offset in the file, as the symbolizer names it
    php = [Frame("zif_getrusage"), Frame(UNKNOWN, module="/dev/zero", address=0x08000040, resolved=False)]
    assert [f.name for f in merge_jit(php, [[Frame("f", FrameKind.PHP)]], False, regions, marker)] == \
        ["zif_getrusage", "[ruby jit]", "f"]


def test_an_interpreter_entry_before_the_jit_code_takes_no_frames():
    """JIT code that called into the interpreter (an entry between the leaf and the JIT code): the
    walker's frames cannot be split between that entry and the JIT code, so all go above the marker,
    in order, never below it (under YJIT a sample had shown `<main>` called from libruby, called from
    `[ruby jit]` at the root)."""
    regions = jit_regions(parse_maps(MAPS))
    marker = Frame("[ruby jit]", FrameKind.JIT, resolved=False)
    groups = [[Frame("Spinner#spin", FrameKind.RUBY), Frame("Runner#step", FrameKind.RUBY),
               Frame("<main>", FrameKind.RUBY)]]
    native = [Frame("__clock_gettime"), Frame("rb_vm_exec"), Frame("libruby-3.1.so.3.1.2+0x148ecc", resolved=False),
              Frame(UNKNOWN, address=0x7fb92786c100, resolved=False), Frame("rb_vm_exec"), Frame("main")]
    out = merge_jit(native, groups, False, regions, marker)
    assert [f.name for f in out] == ["__clock_gettime", "rb_vm_exec", "libruby-3.1.so.3.1.2+0x148ecc", "[ruby jit]",
                                     "Spinner#spin", "Runner#step", "<main>"]


def test_stack_without_jit_code_is_left_to_the_usual_merge():
    regions = jit_regions(parse_maps(MAPS))
    native = [Frame("leaf"), Frame(UNKNOWN, address=0x1000, resolved=False), Frame("rb_vm_exec")]
    assert merge_jit(native, [[Frame("m", FrameKind.RUBY)]], False, regions, Frame("[ruby jit]")) is None
