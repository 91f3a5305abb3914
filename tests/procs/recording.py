"""Reading a recorded process with no live process to read: `no_proc` refuses every read of /proc
(but of hotstack's own descriptors) and every process_vm_readv, so that a reader that reads the
live process (by its pid) instead of the Process it is given fails. Used by the recorded-process
tests of the runtimes' readers, the symbolizer and the unwinder's tables
(tests/python/test_recorded.py, tests/runtimes/*/test_*_recorded.py, tests/unwind/test_recorded_tables.py)."""

from __future__ import annotations

import builtins
import contextlib
import os
import subprocess
import time
from pathlib import Path

from hotstack import procs
from hotstack.procs import memory as procs_memory


def _is_proc(path) -> bool:
    """A /proc path but hotstack's own descriptors' (/proc/self/fd/N: what a file it opened, a
    recording's copy too, is read through)."""
    if isinstance(path, int):
        return False
    path = os.fsdecode(path)
    return (path == "/proc" or path.startswith("/proc/")) and not path.startswith("/proc/self/fd/")


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


def record_and_end(pid: int, directory: Path, stop) -> Path:
    """Record the live process `pid` into `directory` (held stopped while its memory is read), then
    end it with `stop()`: what is read next is the recording alone."""
    procs.record(pid, directory, stop=True)
    stop()
    assert not procs.exists(pid), f"pid {pid} still runs"
    return directory


def record_program(argv: list[str], directory: Path, settle: float = 0.3) -> tuple[Path, str]:
    """Start `argv`, wait for the first line it prints (it is ready), let it run `settle` seconds
    more (into its loop), record it into `directory` and end it: (the directory, that line)."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)

    def stop() -> None:
        child.kill()
        child.wait()

    try:
        line = child.stdout.readline()
        assert line, f"{argv[0]} ended before it was ready"
        time.sleep(settle)
        return record_and_end(child.pid, directory, stop), line
    finally:
        stop()
        child.stdout.close()


def detected(directory: Path, detect, runtime: str):
    """(the RecordedProcess of `directory`, what the runtime's `detect` finds in it), which must be
    found (called under no_proc: from the recording alone)."""
    process = procs.RecordedProcess(directory)
    found = detect(process)
    assert found is not None, f"{runtime} not found in the recording"
    return process, found
