"""Put Python frames where the interpreter ran them in a native stack.

Each native frame of the evaluation loop (`_PyEval_EvalFrameDefault`) is replaced, in order,
by the Python frames that call ran (one group per call, see frames.eval_groups). Native frames
between them (C extensions, the C API) and the kernel frames stay where they are. Groups left
over when the native stack ends early (no frame pointers in libpython, truncated unwinding) go
at the root end, where those calls were. A chain the walker cut (deeper than it walks) ends in
a `[truncated]` frame where the missing, outer frames would be.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress
from operator import attrgetter

from ...profile.model import TRUNCATED, Frame

# Only the loop itself runs frames; wrappers such as PyEval_EvalFrameEx stay native frames.
EVAL_FRAME = "_PyEval_EvalFrameDefault"


_EVAL_PART = EVAL_FRAME + "."


def is_eval_frame(frame: Frame) -> bool:
    name = frame.name
    return name == EVAL_FRAME or name.startswith(_EVAL_PART)     # also its `.cold` part


_anchor_tests: dict[tuple, Callable[[Frame], bool]] = {}


def anchor_test(named: Callable[[Frame], bool], file_name: str, ranges: tuple[tuple[int, int], ...]
                ) -> Callable[[Frame], bool]:
    """A test of a runtime's entry frames (merge's `is_anchor`): `named` by name, and, for a
    stripped file that names them not, a frame of the file `file_name` whose address lies in one of
    `ranges` ([start, end) virtual addresses), which the symbolizer names `file_name+0xADDRESS`.
    One test per file and ranges: merge remembers each test's answers by frame name."""
    if not ranges or not file_name:
        return named
    key = (named, file_name, ranges)
    test = _anchor_tests.get(key)
    if test is None:
        prefix = file_name + "+0x"

        def test(frame: Frame) -> bool:
            if named(frame):
                return True
            if not frame.name.startswith(prefix):
                return False
            try:
                address = int(frame.name[len(prefix):], 16)
            except ValueError:
                return False
            return any(lo <= address < hi for lo, hi in ranges)
        if len(_anchor_tests) >= 256:
            _anchor_tests.clear()
        _anchor_tests[key] = test
    return test


# A native stack that reaches one of these was unwound to its root: its count of evaluation-loop
# frames is complete.
ROOT_FRAMES = frozenset({"_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone",
                         "clone3", "__clone", "__clone3", "thread_start"})


_NAME = attrgetter("name")


class _AnchorNames(dict):
    """Frame name -> whether `is_anchor` takes a frame of that name, asked once per name: the
    anchors of every interpreter are told by name, and calling the predicate on each native frame
    of each sample costs a tenth of a Python stack's naming."""

    def __init__(self, is_anchor: Callable[[Frame], bool]) -> None:
        super().__init__()
        self.is_anchor = is_anchor

    def __missing__(self, name: str) -> bool:
        if len(self) >= 4096:
            self.clear()
        found = self[name] = bool(self.is_anchor(Frame(name)))
        return found


_anchor_names: dict[Callable[[Frame], bool], _AnchorNames] = {}


def merge(native: list[Frame], groups: list[list[Frame]], truncated: bool = False,
          is_anchor: Callable[[Frame], bool] = is_eval_frame) -> list[Frame]:
    """Leaf-first native frames + leaf-first groups of Python frames -> one leaf-first stack.

    `is_anchor` picks the native frames a group replaces (other interpreters reuse this: Ruby's
    rb_vm_exec).

    Groups are matched to evaluation-loop frames from the root when the native stack is complete
    and has at least as many of them: a call of the loop that has just started (its frames not
    yet linked into the thread's chain) is then the leaf one left native. Otherwise they are
    matched from the leaf, and groups left over go at the root end. A truncated chain holds the
    leaf-most calls only: its groups are matched from the leaf, and end in TRUNCATED.
    """
    if truncated:
        groups = groups[:-1] + [groups[-1] + [TRUNCATED]]
    anchors = _anchor_names.get(is_anchor)
    if anchors is None:
        anchors = _anchor_names[is_anchor] = _AnchorNames(is_anchor)
    # (C-level passes: a name's answer is a dict hit after its first frame)
    evals = list(compress(range(len(native)), map(anchors.__getitem__, map(_NAME, native))))
    skip = 0
    if not truncated and native and native[-1].name in ROOT_FRAMES and len(evals) > len(groups):
        skip = len(evals) - len(groups)
    out: list[Frame] = []
    done = 0        # native frames before this are in out
    replaced = 0
    for j, pos in enumerate(evals):
        if 0 <= j - skip < len(groups):
            out += native[done:pos]
            out += groups[j - skip]
            done = pos + 1
            replaced += 1
    out += native[done:]
    for group in groups[replaced:]:
        out += group
    return out
