"""Stacks trimmed for the terminal table (profile/trim.py) and the table made of them (-o columns)."""

from __future__ import annotations

import io

from hotstack.gadget.output import render_columns
from hotstack.profile.model import Frame, FrameKind, Profile, Sample
from hotstack.profile.trim import trim_stack


def frames(*names: str, kind: FrameKind = FrameKind.NATIVE) -> tuple[Frame, ...]:
    return tuple(Frame(n, kind) for n in names)


K = FrameKind.KERNEL


def test_glue_dropped_and_long_stacks_cut_keeping_the_entry():
    stack = (frames("copy_page", "do_fault", kind=K) + frames("entry_SYSCALL_64_after_hwframe", "do_syscall_64", kind=K)
             + frames("leaf", *(f"f{i}" for i in range(10)), "main", "__libc_start_call_main", "__libc_start_main_impl",
                      "_start"))
    shown, left_out = trim_stack(stack, 8)
    names = [f.name if f else None for f in shown]
    assert names == ["copy_page", "do_fault", "leaf", "f0", "f1", "f2", None, "main"]
    assert left_out == len(stack) - 7
    short = frames("spin", "main", "_start")
    assert [f.name for f in trim_stack(short, 8)[0]] == ["spin", "main"]
    assert [f.name for f in trim_stack(frames("_start"), 8)[0]] == ["_start"]   # never empty


def test_python_stacks_keep_python_frames_past_the_first():
    stack = (frames("PyNumber_Add") + frames("inner", kind=FrameKind.PYTHON) + frames("_PyEval_EvalFrameDefault")
             + frames("outer", kind=FrameKind.PYTHON) + frames("PyObject_Call", "Py_BytesMain"))
    assert [f.name for f in trim_stack(stack, 8)[0]] == ["PyNumber_Add", "inner", "outer"]


def test_columns_fold_own_rows_and_trim():
    deep = frames("leaf", *(f"f{i}" for i in range(20)), "main", "_start")
    own = frames("_PyEval_EvalFrameDefault", "Py_BytesMain")
    p = Profile([Sample(deep, 30, 10, 10, "busy"), Sample(own, 5, 99, 99, "hotstack"),
                 Sample(own[:1], 2, 99, 100, "hotstack")], 0, 10**9, 49)
    out = io.StringIO()
    render_columns(p, out, own_pids={99})
    text = out.getvalue()
    assert "_PyEval_EvalFrameDefault" not in text and "hotstack (this profiler" in text
    assert "2 threads" in text and " 7 " in text           # both own stacks in one row: 5 + 2 samples
    assert "f4" in text and "f5" not in text and "… 16 more" in text and "main" in text and "_start" not in text
    assert "own samples in one row" in text
    # The table fits the width; the footer is one line however long (scripts read it as the last line).
    assert max(len(line) for line in text.splitlines()[:-1]) <= 160
    assert text.splitlines()[-1].startswith("37 samples in ")
    shown = io.StringIO()
    render_columns(p, shown)   # asked for (or not whole host): its stacks as they are
    assert "_PyEval_EvalFrameDefault" in shown.getvalue()


def test_whole_host_table_shows_hotstack_as_one_row(tmp_path):
    """`make run`'s command on the real host: hotstack's pid has one row (the folded one), each
    stack at most 8 lines, every line within the table's width; --show-hotstack gives its stacks."""
    import re
    import subprocess
    import sys

    import pytest

    from ..conftest import ROOT

    if __import__("os").geteuid() != 0:
        pytest.skip("needs root: loads BPF programs")
    for flag in ([], ["--show-hotstack"]):
        proc = subprocess.Popen([sys.executable, "-m", "hotstack", "run", "profile_cpu", "--host", "--map-fetch-interval", "0", "--timeout", "4",
                                 "--max-entries", "200", *flag], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT)
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        own_rows = [line for line in out.splitlines() if re.match(rf"│ \S+\s+│ +{proc.pid} │", line)]
        if not flag:
            assert all("hotstack (this profiler" in line for line in own_rows), out[-4000:]
            assert max(len(line) for line in out.splitlines()[:-1]) <= 160   # the footer is one line
            cells = re.split(r"^[├└].*$", out, flags=re.M)
            assert all(len(c.strip("\n").splitlines()) <= 8 for c in cells[1:-1]), out[-4000:]
        elif own_rows:   # hotstack sampled itself: its own frames, not the folded row
            assert not any("hotstack (this profiler" in line for line in own_rows), out[-4000:]
