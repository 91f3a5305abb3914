"""A JVM recorded into a directory (procs.record), then ended, and read back with no /proc and no
process_vm_readv: the HotSpot reader finds libjvm and reads the JVM's vmStructs and layout, and
names the Java methods its threads' stacks hold, from the recording alone."""

from __future__ import annotations

import subprocess
import time

import numpy as np

from hotstack import procs
from hotstack.runtimes.hotspot.names import Names
from hotstack.runtimes.hotspot.source import HotSpotSource
from hotstack.runtimes.hotspot.vmstructs import read_vmstructs, vm_release
from tests.procs.recording import no_proc, record_and_end
from .test_hotspot import _jdk, classes  # noqa: F401 (classes: the fixture)

STACK_MAX = 2 << 20       # a thread's stack is a private anonymous mapping of at most this (-Xss1m)


def _stack_methods(process: procs.Process, names: Names) -> set[str]:
    """The Java methods whose Method* a word of a thread's stack holds (an interpreted frame keeps
    its own at fp[-3]), named as the kernel walker's recorded frames are."""
    anonymous = [m for m in process.all_mappings() if m.perms == "rw-p" and not m.is_file]
    words: set[int] = set()
    for m in anonymous:
        if m.end - m.start <= STACK_MAX:
            try:
                data = b"".join(process.read(at, min(1 << 20, m.end - at)) for at in range(m.start, m.end, 1 << 20))
            except procs.MemoryReadError:
                continue
            values = np.frombuffer(data, dtype="<u8")
            words.update(int(v) for v in np.unique(values[(values & 7) == 0]) if v)
    found = set()
    for word in words:
        frame = names.method(word)
        if frame is not None:
            found.add(frame.name)
    return found


def test_jvm_methods_are_named_from_the_recording_alone(classes, tmp_path, monkeypatch):  # noqa: F811
    child = subprocess.Popen([_jdk("java"), "-Xint", "-Xmx64m", "-Xss1m", "-cp", str(classes), "HotWork", "60", "1"],
                             stdout=subprocess.DEVNULL)

    def stop() -> None:
        child.kill()
        child.wait()

    try:
        deadline = time.monotonic() + 30
        while HotSpotSource()._layout(procs.LiveProcess(child.pid)) is None and time.monotonic() < deadline:
            time.sleep(0.2)        # (its code cache and interpreter made)
        time.sleep(0.5)            # (its worker in the loop)
        release = vm_release(child.pid, read_vmstructs(child.pid))
        directory = record_and_end(child.pid, tmp_path / "rec", stop)
    finally:
        stop()
    with no_proc(monkeypatch):
        process = procs.RecordedProcess(directory)
        source = HotSpotSource()
        layout = source._layout(process)
        assert layout is not None, "no JVM found in the recording"
        assert release and vm_release(process, read_vmstructs(process)) == release
        methods = _stack_methods(process, source._names(process, layout))
    assert {"HotWork.run", "HotWork.work"} <= methods, sorted(methods)[:50]
    assert {"HotWork.heavy", "HotWork.light"} & methods, sorted(methods)[:50]
