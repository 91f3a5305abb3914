"""A CPython process recorded into a directory (procs.record), then ended, and read back with no
/proc and no process_vm_readv: the CPython reader names its threads' frames and the symbolizer a
native address of it, from the recording alone."""

from __future__ import annotations

import builtins
import contextlib
import os
import time

import pytest

from hotstack import procs
from hotstack.procs import memory as procs_memory
from hotstack.runtimes.python import code, detect, frames
from hotstack.symbols.symbolizer import Symbolizer
from pyframes_helpers import NEST


@pytest.fixture
def recorded(python, target, tmp_path):
    """(the RecordedProcess, what the program told) of NEST recorded, then ended."""
    t = target(python, NEST)
    time.sleep(0.2)         # (the worker thread in its loop)
    procs.record(t.pid, tmp_path / "rec", stop=True)
    t.stop()
    return tmp_path / "rec", t.info


def _is_proc(path) -> bool:
    if isinstance(path, int):
        return False
    path = os.fsdecode(path)
    return path == "/proc" or path.startswith("/proc/")


@contextlib.contextmanager
def no_proc(monkeypatch):
    """/proc unreadable and process_vm_readv refused: any read of a live process fails."""
    def refusing(real):
        def call(path, *args, **kwargs):
            if _is_proc(path):
                raise PermissionError(13, "no /proc in this test", os.fsdecode(path))
            return real(path, *args, **kwargs)
        return call

    for module, name in ((builtins, "open"), (os, "open"), (os, "stat"), (os, "lstat"), (os, "readlink"),
                         (os, "listdir"), (os, "scandir")):
        monkeypatch.setattr(module, name, refusing(getattr(module, name)))

    def no_readv(*args):
        raise AssertionError("process_vm_readv called on a recorded process")
    monkeypatch.setattr(procs_memory, "_readv", no_readv)
    try:
        yield
    finally:
        monkeypatch.undo()


def test_no_proc_refuses_every_live_read(monkeypatch):
    with no_proc(monkeypatch):
        with pytest.raises(OSError):
            open("/proc/self/maps")
        assert procs.LiveProcess(os.getpid()).stat() is None
        assert procs.LiveProcess(os.getpid()).maps_text() == ""
        with pytest.raises(AssertionError):
            procs.LiveProcess(os.getpid()).read(id(monkeypatch), 8)
    assert procs.LiveProcess(os.getpid()).stat() is not None      # (undone)


def test_threads_are_named_from_the_recording_alone(recorded, monkeypatch):
    directory, told = recorded
    with no_proc(monkeypatch):
        process = procs.RecordedProcess(directory)
        proc = detect.detect(process)
        assert proc is not None, "CPython not found in the recording"
        cache = code.CodeCache()

        def names(thread_id: int) -> list[str]:
            raw = frames.walk_thread(proc, thread_id)
            return [cache.frame(process, proc.offsets, f.code, f.instr, f.checksum).name for f in raw
                    if frames.is_boundary(proc.offsets, f, proc.none)[0]]

        main, worker = names(told["main"]), names(told["worker"])
    # (co_qualname from 3.11 on, co_name before)
    assert main[:3] == ["leaf", "middle", "Outer.run" if tuple(told["version"]) >= (3, 11) else "run"], main
    assert worker[:1] == ["worker_body"], worker


def test_the_symbolizer_names_a_native_address_of_the_recording(recorded, monkeypatch):
    directory, told = recorded
    with no_proc(monkeypatch):
        process = procs.RecordedProcess(directory)
        table = procs.ProcessTable()
        table.enter(process.info())
        symbolizer = Symbolizer(table, perf_maps=False)
        address = told["Py_GetVersion"]
        named = symbolizer.user_frames(process.pid, [address, address + 4])
    assert [f.name for f in named] == ["Py_GetVersion", "Py_GetVersion"], named
    assert os.path.basename(named[0].module).startswith(("python", "libpython")), named[0]
