"""SampleMaker names a stack that recurs from one interval to the next once: only for the same
process (an exec or a reused pid makes a new process-table entry), only when every frame is
settled, and not after a whole interval without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hotstack.procs import ProcessTable
from hotstack.profile.model import LOST_USER, TRUNCATED, Frame, FrameKind
from hotstack.sampling.buffers import RawStack
from hotstack.sampling.samples import SampleMaker, settled
from hotstack.symbols.symbolizer import Symbolizer

from .conftest import WORKLOADS, need, run
from .test_symbolizer import _address_of


@pytest.fixture(scope="module")
def hot_c(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("named") / "hot_c"
    run(need("gcc"), "-O1", "-fno-omit-frame-pointer", WORKLOADS / "hot_c.c", "-o", exe)
    return exe


def test_settled_frames():
    assert settled([Frame("main", FrameKind.NATIVE, "/usr/bin/x"),
                    Frame("x+0x10", FrameKind.NATIVE, "/usr/bin/x", resolved=False),
                    Frame("do_syscall_64", FrameKind.KERNEL, "[kernel.kallsyms]"),
                    Frame("handler", FrameKind.PYTHON, file="app.py"), TRUNCATED, LOST_USER])
    # no mapping yet (the maps may be read again), a JIT frame (its code moves), a Python code
    # object not read yet, another runtime's frame
    for frame in (Frame("[unknown]", resolved=False), Frame("f", FrameKind.JIT, "perf-1.map"),
                  Frame("[unknown python]", FrameKind.PYTHON, resolved=False),
                  Frame("Main.run", FrameKind.JAVA)):
        assert not settled([Frame("main", FrameKind.NATIVE, "/usr/bin/x"), frame]), frame


def test_a_recurring_stack_is_named_once_per_process(hot_c, workloads):
    processes = ProcessTable()
    maker = SampleMaker(Symbolizer(processes), processes, [])
    proc = workloads([hot_c])
    addr = _address_of(maker.symbolizer, proc.pid, hot_c, "stripped_hot_loop")
    raw = RawStack(proc.pid, proc.pid, "hot_c", (addr + 3,), (), 5)

    first, _ = maker.sample(raw, strip_bpf=False)
    assert [f.name for f in first.stack] == ["stripped_hot_loop"] and maker.renamed == 0
    maker.next_interval()
    again, _ = maker.sample(raw, strip_bpf=False)
    assert again.stack is first.stack and maker.renamed == 1
    assert (again.value, again.pid, again.comm) == (5, proc.pid, "hot_c")

    # an address in no mapping is [unknown]: named again every time
    lost = RawStack(proc.pid, proc.pid, "hot_c", (0x10, addr + 3), (), 1)
    maker.sample(lost, strip_bpf=False)
    maker.next_interval()
    maker.sample(lost, strip_bpf=False)
    assert maker.renamed == 1

    # the process exec'ed (or its pid was reused): a new process-table entry, named anew
    processes.forget(proc.pid)
    maker.sample(raw, strip_bpf=False)
    assert maker.renamed == 1
    maker.sample(raw, strip_bpf=False)
    assert maker.renamed == 2

    # not met for a whole interval: let go
    maker.next_interval()
    maker.next_interval()
    maker.sample(raw, strip_bpf=False)
    assert maker.renamed == 2
