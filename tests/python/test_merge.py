"""The merge of Python frames into native stacks (pure: no process, no kernel)."""

from hotstack.profile.model import Frame, FrameKind
from hotstack.runtimes.common.merge import merge

EVAL = Frame("_PyEval_EvalFrameDefault")


def py(name):
    return Frame(name, FrameKind.PYTHON, file="x.py", line=1)


def names(frames):
    return [f.name for f in frames]


def test_each_eval_frame_takes_its_group_in_order():
    native = [Frame("leaf_c"), EVAL, Frame("call_back"), EVAL, Frame("main"), Frame("_start")]
    out = merge(native, [[py("inner")], [py("outer"), py("<module>")]])
    assert names(out) == ["leaf_c", "inner", "call_back", "outer", "<module>", "main", "_start"]


def test_cold_part_is_an_eval_frame():
    out = merge([Frame("_PyEval_EvalFrameDefault.cold"), Frame("_start")], [[py("f")]])
    assert names(out) == ["f", "_start"]


def test_truncated_native_stack_puts_the_rest_at_the_root():
    out = merge([Frame("PyLong_FromLong"), EVAL, Frame("[unknown]")], [[py("spin")], [py("a"), py("<module>")]])
    assert names(out) == ["PyLong_FromLong", "spin", "[unknown]", "a", "<module>"]


def test_no_native_frames():
    assert names(merge([], [[py("f")], [py("<module>")]])) == ["f", "<module>"]


def test_call_just_entered_stays_native_when_the_stack_is_complete():
    # The leaf loop call has not linked its frame yet: the walk saw one group, the stack has two loops.
    native = [EVAL, Frame("PyObject_CallObject"), Frame("call_back"), EVAL, Frame("_start")]
    out = merge(native, [[py("outer"), py("<module>")]])
    assert names(out) == ["_PyEval_EvalFrameDefault", "PyObject_CallObject", "call_back", "outer", "<module>",
                          "_start"]
