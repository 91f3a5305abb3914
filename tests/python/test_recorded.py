"""A CPython process recorded into a directory (procs.record), then ended, and read back with no
/proc and no process_vm_readv: the CPython reader names its threads' frames and the symbolizer a
native address of it, from the recording alone."""

from __future__ import annotations

import os
import time

import pytest

from hotstack import procs
from hotstack.runtimes.python import code, detect, frames
from hotstack.symbols.symbolizer import Symbolizer
from pyframes_helpers import NEST
from tests.procs.recording import no_proc, record_and_end

pytestmark = pytest.mark.debian_unstable


@pytest.fixture
def recorded(python, target, tmp_path):
    """(the RecordedProcess, what the program told) of NEST recorded, then ended."""
    t = target(python, NEST)
    time.sleep(0.2)         # (the worker thread in its loop)
    return record_and_end(t.pid, tmp_path / "rec", t.stop), t.info


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


def test_the_frame_source_recognizes_the_recording(recorded, monkeypatch):
    """The engine's interface (runtimes/plugin.py) takes a Process: CPython's frame source finds the
    interpreter of a recorded process with no /proc, and remembers it to list at attach()."""
    from hotstack.runtimes.registry import FRAME_SOURCES

    directory, _told = recorded
    with no_proc(monkeypatch):
        process = procs.RecordedProcess(directory)
        source = FRAME_SOURCES["python"]()
        assert source.detect(process), "CPython's source did not recognize the recording"
        assert [p.pid for p in source._found] == [process.pid]
