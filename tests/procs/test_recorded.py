"""procs.record and RecordedProcess: what a recording holds, and `hotstack doctor --record`. (The
runtimes' readers and the symbolizer on a recording: tests/python/test_recorded.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hotstack import procs
from tests.procs.recording import no_proc


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hotstack", "doctor", *args], capture_output=True, text=True,
                          timeout=120)


def test_doctor_records_a_process_read_back_as_it_was(tmp_path):
    child = subprocess.Popen(["sleep", "30"])
    try:
        done = _doctor("--pid", str(child.pid), "--record", str(tmp_path / "rec"))
        stat = procs.read_stat(child.pid)
        live_maps = procs.read_maps_text(child.pid)
        stack = next(m for m in procs.parse_maps(live_maps) if m.path == "[stack]")
        top = procs.LiveProcess(child.pid).read(stack.end - 64, 64)
    finally:
        child.kill()
        child.wait()
    assert done.returncode == 0, done.stderr
    assert f"process {child.pid} recorded" in done.stdout
    recorded = procs.RecordedProcess(tmp_path / "rec")
    assert recorded.stat() == stat and recorded.exe_path().endswith("/sleep")
    # the copies stand for the files: the same spans, each mapping of a copied file the copy's
    assert [m.span[:3] for m in recorded.all_mappings()] == [m.span[:3] for m in procs.parse_maps(live_maps)]
    exe = [m for m in recorded.exec_maps() if m.path.endswith("/sleep")]
    assert exe and all(recorded.mapped_file_path(m).startswith(str(tmp_path / "rec")) for m in exe)
    assert recorded.read(stack.end - 64, 64) == top       # (the stack's top does not change in a sleep)
    with pytest.raises(procs.MemoryReadError):
        recorded.read(8, 8)          # nothing is recorded at the first page


def test_doctor_record_needs_a_live_pid(tmp_path):
    for args, said in ((("--record", str(tmp_path / "a")), "--record needs --pid PID"),
                       (("--pid", "999999999", "--record", str(tmp_path / "b")), "no process 999999999")):
        done = _doctor(*args)
        assert done.returncode == 2 and done.stderr.strip() == f"hotstack doctor: {said}", done


def test_no_proc_refuses_every_live_read(monkeypatch):
    with no_proc(monkeypatch):
        with pytest.raises(OSError):
            open("/proc/self/maps")
        assert procs.LiveProcess(os.getpid()).stat() is None
        assert procs.LiveProcess(os.getpid()).maps_text() == ""
        with pytest.raises(AssertionError):
            procs.LiveProcess(os.getpid()).read(id(monkeypatch), 8)
    assert procs.LiveProcess(os.getpid()).stat() is not None      # (undone)
