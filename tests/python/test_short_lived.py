"""Short-lived Python processes: listed at their first sight, before the interpreter is made, and
named from the walker's copies of their code objects after they exit.

A run of a fraction of a second (a CLI tool, a test, a hook) used to end before the retry that
found its interpreter made, and before the naming pass that read its code objects: its samples
showed the evaluation loop's native frames, or `[unknown python]`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.runtimes.python.detect import detect, inspect_binary
from hotstack.runtimes.python.linetable import line_for
from hotstack.sampling import Engine, EngineConfig
from hotstack.ebpf.features import helper_available

pytestmark = pytest.mark.root

_PTRACE_TRACEME, _PTRACE_DETACH = 0, 17
_libc = ctypes.CDLL(None, use_errno=True)


def _traced_at_exec(argv: list[str]) -> subprocess.Popen:
    """`argv` started and stopped right after its exec (ptrace: the loader has not run yet)."""
    proc = subprocess.Popen(argv, preexec_fn=lambda: _libc.ptrace(_PTRACE_TRACEME, 0, None, None))
    _pid, status = os.waitpid(proc.pid, 0)
    assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGTRAP, status
    return proc


def test_a_process_seen_at_its_exec_is_listed_before_its_interpreter_is_made(python):
    """An interpreter whose executable holds _PyRuntime, seen at its exec: provisional (no
    interpreter yet, and where the walker will find it); once it runs, the same pointer holds the
    interpreter that detect confirms. One that links libpython is not listed on a guess."""
    proc = _traced_at_exec([python, "-c", "import time; time.sleep(60)"])
    try:
        early = detect(proc.pid)
        static = inspect_binary(os.path.realpath(python)) is not None
        if static:
            assert early is not None and early.provisional, early
            assert early.threads_head == 0 and early.interp_ptr == early.runtime + early.offsets.interpreters_head
        else:
            assert early is None, early
        _libc.ptrace(_PTRACE_DETACH, proc.pid, None, None)
        deadline = time.monotonic() + 10
        found = None
        while time.monotonic() < deadline and (found is None or found.provisional):
            time.sleep(0.05)
            found = detect(proc.pid)
        assert found is not None and not found.provisional, found
        assert found.threads_head == found.interp + found.offsets.threads_head
        if static:
            assert found.interp_ptr == early.interp_ptr
    finally:
        proc.kill()
        proc.wait()


def test_a_cut_line_table_names_only_the_instructions_it_covers():
    """The walker copies the first PY_SNAP_LINES bytes of a line table: an instruction past them has
    line 0 (not known), never the last line the copy reached."""
    # 3.11+: entries of one code unit each (code 13: a line delta as a signed varint), lines 10, 11, 12
    table = bytes([0xE8, 0x00, 0xE8, 0x02, 0xE8, 0x02])
    assert [line_for((3, 12), table, 10, i) for i in range(3)] == [10, 11, 12]
    cut = table[:4]
    assert [line_for((3, 12), cut, 10, i, complete=False) for i in range(3)] == [10, 11, 0]
    # <= 3.9 lnotab: (byte delta, line delta) pairs
    lnotab = bytes([2, 1, 2, 1])
    assert line_for((3, 9), lnotab, 5, 6) == 7
    assert line_for((3, 9), lnotab[:2], 5, 6, complete=False) == 0


WORK = """\
import time


def hot_leaf():
    s = 0
    for i in range(2000):
        s += i
    return s


def hot(seconds):
    end = time.time() + seconds
    while time.time() < end:
        hot_leaf()


hot({seconds})
"""
LEAF_LINES = range(5, 9)       # hot_leaf's body in WORK


@pytest.mark.shares
@pytest.mark.skipif(not helper_available("bpf_loop"), reason="the walker copies code objects where it has bpf_loop (5.17+)")
def test_runs_of_a_fraction_of_a_second_have_their_python_frames_named(tmp_path):
    """Runs of 0.15 s, one after another: most of the samples that run Python code name it, with the
    file and the line, though every process is gone before the interval's names are made."""
    script = tmp_path / "short_work.py"
    script.write_text(WORK.format(seconds=0.15))
    pids = set()
    with Engine(EngineConfig(frequency=199)) as prof:
        source = next(src for src in prof.runtimes if src.name == "python")
        time.sleep(0.5)
        prof.collect()
        for _ in range(15):
            proc = subprocess.Popen(["/usr/bin/python3", str(script)])
            pids.add(proc.pid)
            assert proc.wait(timeout=30) == 0
            time.sleep(0.05)
        time.sleep(0.3)
        every = [s for _ in range(2) for s in prof.collect()[0].samples]
        samples = [s for s in every if s.pid in pids]
        copies = source.codes.copies
    running = named = leaf = leaf_right = 0
    for s in samples:
        python = [f for f in s.stack if f.kind is FrameKind.PYTHON]
        in_eval = any("EvalFrame" in f.name for f in s.stack if f.kind is FrameKind.NATIVE)
        if python or in_eval:
            running += s.value       # (the start's imports too: they run Python code)
        if python and all(f.resolved for f in python):
            named += s.value
        if any(f.name == "hot_leaf" for f in python):
            leaf += s.value
            if any(f.name == "hot_leaf" and f.file == str(script) and f.line in LEAF_LINES for f in python):
                leaf_right += s.value
    assert copies > 0, "no code object was named from the walker's copies"
    assert running >= 60, (f"{running} samples ran Python code in 15 runs of 0.15 s at 199 Hz "
                           f"({len(samples)} of the runs', {len(every)} in all)")
    assert named >= 0.6 * running, f"{named} of {running} samples that run Python code have it named"
    assert leaf >= 0.25 * running and leaf_right >= 0.95 * leaf, (leaf, leaf_right, running)


def test_a_runtime_that_execs_is_announced_at_its_exec_not_at_its_first_sample():
    """Once a python3 process was found, a process that execs into python3 is announced by the exec
    itself (bpf/pids.h announce_exec: runtime_comms) and listed: here one stopped at its exec, which
    never runs and so is never sampled, is listed all the same (provisionally: its interpreter is
    not made)."""
    with Engine(EngineConfig(frequency=49)) as prof:
        source = next(src for src in prof.runtimes if src.name == "python")
        first = subprocess.Popen(["/usr/bin/python3", "-c", "import time\nend = time.time() + 5\n"
                                  "while time.time() < end: pass"])
        try:
            deadline = time.monotonic() + 10
            while "python3" not in prof._runtime_comms and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "python3" in prof._runtime_comms, prof._runtime_comms
        finally:
            first.kill()
            first.wait()
        proc = _traced_at_exec(["/usr/bin/python3", "-c", "pass"])
        try:
            deadline = time.monotonic() + 5
            while proc.pid not in source._procs and time.monotonic() < deadline:
                time.sleep(0.02)
            assert proc.pid in source._procs, "a python3 stopped at its exec was not listed"
            assert source._procs[proc.pid][0].provisional
        finally:
            proc.kill()
            proc.wait()


def test_a_starting_python_is_confirmed_only_with_its_own_interpreter():
    """detect() polled from the spawn of the system's python3, 20 runs: every interpreter it
    confirms is the one it confirms once the process runs. While an interpreter is being made,
    a slot of _PyRuntime near interpreters.head can point to a structure that passes the
    back-pointer check for a moment (Debian 12's 3.11.2: a heap block 1-3 ms after the exec, in
    about a third of the runs); a process listed with it had no Python frames at all."""
    system = Path("/usr/bin/python3")
    if not system.exists():
        pytest.skip("no system python3")
    wrong = []
    for _ in range(20):
        proc = subprocess.Popen([str(system), "-c", "import time; time.sleep(30)"])
        try:
            confirmed = set()
            start = time.monotonic()
            while time.monotonic() - start < 0.05:
                found = detect(proc.pid)
                if found is not None and not found.provisional:
                    confirmed.add(found.interp)
            final, deadline = None, time.monotonic() + 10     # (its interpreter made: later on a busy host)
            while (final is None or final.provisional) and time.monotonic() < deadline:
                time.sleep(0.05)
                final = detect(proc.pid)
            assert final is not None and not final.provisional, final
            if confirmed - {final.interp}:
                wrong.append((sorted(map(hex, confirmed)), hex(final.interp)))
        finally:
            proc.kill()
            proc.wait()
    assert not wrong, wrong
