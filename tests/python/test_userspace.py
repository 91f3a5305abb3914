"""Detection, offsets, frame chains, code objects and line tables against live interpreters.

The walk here is the userspace twin of the BPF walker (same offsets, same chain rules);
the BPF path is tested end to end in test_profile.py.
"""

from __future__ import annotations

import textwrap
import time

import pytest

from hotstack.runtimes.python import code, detect, frames
from hotstack.runtimes.python.linetable import line_for
from hotstack.procs import LiveProcess
from hotstack.runtimes.common.memory import MemoryReadError
from pyframes_helpers import NEST


def _names(proc, raw):
    cache = code.CodeCache()
    groups = frames.eval_groups(proc.offsets, raw, proc.none)
    return [[cache.frame(proc.pid, proc.offsets, f.code, f.instr, f.checksum) for f in g] for g in groups]


@pytest.mark.debian_unstable
def test_detect_and_walk_main_thread(python, target):
    t = target(python, NEST)
    time.sleep(0.1)
    proc = detect.detect(t.pid)
    assert proc is not None, "CPython not detected"
    assert list(proc.version) == t.info["version"]
    raw = frames.walk_thread(proc, t.info["main"])
    flat = [f for g in _names(proc, raw) for f in g]
    names = [f.name for f in flat]
    run = "Outer.run" if proc.version >= (3, 11) else "run"
    assert names == ["leaf", "middle", run, "<module>"], names
    assert flat[0].line == 6 and flat[1].line == 8 and flat[2].line == 11, [(f.name, f.line) for f in flat]
    assert all(f.file == "<string>" for f in flat)
    # One evaluation-loop call per frame up to 3.10; from 3.11 nested Python calls share one.
    groups = _names(proc, raw)
    assert len(groups) == (4 if proc.version <= (3, 10) else 1)


@pytest.mark.debian_unstable
def test_walk_other_thread(python, target):
    t = target(python, NEST)
    proc = detect.detect(t.pid)
    flat = [f for g in _names(proc, frames.walk_thread(proc, t.info["worker"])) for f in g]
    assert [f.name for f in flat][:1] == ["worker_body"]
    assert flat[0].line == 14
    assert frames.walk_thread(proc, 12345) == []      # no such thread: nothing, not an error


@pytest.mark.debian_unstable
def test_line_tables_match_the_interpreter(python, target):
    t = target(python, NEST)
    proc = detect.detect(t.pid)
    mem = LiveProcess(t.pid)
    for addr, expected in t.info["codes"].items():
        info = code.read_code(mem, proc.offsets, int(addr))
        assert info.name == expected["name"]
        assert info.firstlineno == expected["first"]
        for offset, line in expected["lines"]:
            assert line_for(proc.version, info.linetable, info.firstlineno, offset) == line, (expected["name"], offset)


@pytest.mark.debian_unstable
def test_reused_code_address_is_not_misnamed(python, target):
    t = target(python, NEST)
    proc = detect.detect(t.pid)
    addr = int(next(iter(t.info["codes"])))
    cache = code.CodeCache()
    real = code.read_code(LiveProcess(t.pid), proc.offsets, addr)
    assert cache.frame(t.pid, proc.offsets, addr, 0, real.checksum).resolved
    stale = cache.frame(t.pid, proc.offsets, addr, 0, real.checksum ^ 0x5A5A)
    assert not stale.resolved and stale.name == "[unknown python]"


@pytest.mark.debian_unstable
def test_exited_target_truncates_instead_of_failing(python, target):
    t = target(python, NEST)
    proc = detect.detect(t.pid)
    t.stop()
    assert frames.walk_thread(proc, t.info["main"]) == []
    frame = code.CodeCache().frame(t.pid, proc.offsets, int(next(iter(t.info["codes"]))), 0, None)
    assert not frame.resolved
    try:
        LiveProcess(t.pid).read(proc.runtime, 8)
        raise AssertionError("read from an exited process succeeded")
    except MemoryReadError:
        pass


def test_not_python(target):
    import subprocess
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert detect.detect(p.pid) is None
    finally:
        p.kill()
        p.wait()


# Maps a read-only copy of every interpreter file it runs at a low address (below the loaded ones),
# as a profiler or a debugger does with the binaries it reads: hotstack itself, profiled by another.
READS_ITS_OWN_BINARIES = textwrap.dedent('''
    import ctypes, json, os, sys, threading, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    running = sorted({l.split()[-1] for l in open("/proc/self/maps")
                      if "python" in l.split()[-1] and "x" in l.split()[1]})
    hint, copies = 0x10000000, []
    for path in running:
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        copies.append(libc.mmap(hint, size, 1, 2, fd, 0))     # PROT_READ, MAP_PRIVATE
        hint += (size + (1 << 20)) & ~((1 << 20) - 1)
    def waiting():
        print(json.dumps({"version": list(sys.version_info[:2]), "copies": copies, "main": threading.get_ident()}),
              flush=True)
        while True:
            time.sleep(0.05)
    waiting()
''')


def test_a_process_that_maps_its_interpreter_as_data_is_still_detected(python, target):
    t = target(python, READS_ITS_OWN_BINARIES)
    assert t.info["copies"] and all(c and c < 0x7f0000000000 for c in t.info["copies"]), t.info
    proc = detect.detect(t.pid)
    assert proc is not None, "CPython not detected"
    # (a load base taken from a copy puts _PyRuntime in the copy: no interpreter there, or a
    # stale one; the walk below then finds nothing)
    names = [f.name for g in _names(proc, frames.walk_thread(proc, t.info["main"])) for f in g]
    assert names[:1] == ["waiting"] and names[-1] == "<module>", names
