"""A Node.js process recorded into a directory (procs.record), then ended, and read back with no
/proc and no process_vm_readv: the V8 reader finds V8's layout in its files, and names the
JavaScript functions the main thread's stack holds, from the recording alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hotstack import procs
from hotstack.runtimes.v8.heap import is_object
from hotstack.runtimes.v8.names import Names
from hotstack.runtimes.v8.source import V8Source
from tests.procs.recording import no_proc, record_program

WORK = Path(__file__).parent / "node_work.js"


def _stack_functions(process: procs.Process, names: Names) -> set[str]:
    """The JavaScript functions (name, script) that the words of the main thread's stack point to:
    those of the frames it runs, read as the kernel walker's recorded frames are named."""
    stack = next(m for m in process.all_mappings() if m.path == "[stack]")
    found = set()
    for at in range(stack.start, stack.end, 1 << 12):
        try:
            page = process.read(at, 1 << 12)
        except procs.MemoryReadError:
            continue
        for i in range(0, len(page), 8):
            word = int.from_bytes(page[i:i + 8], "little")
            frame = names.frame(word, 1) if is_object(word) else None   # (1: a frame's context, not a marker)
            if frame is not None:
                found.add((frame.name.split(" (")[0], frame.file))
    return found


def test_v8_functions_are_named_from_the_recording_alone(tmp_path, monkeypatch):
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on this machine (.ci/install.d/runtimes.sh installs it)")
    # (in its loop, its hot functions compiled)
    directory, ready = record_program([node, str(WORK), "60"], tmp_path / "rec", settle=0.5)
    assert ready.strip() == "ready"
    with no_proc(monkeypatch):
        process = procs.RecordedProcess(directory)
        layout = V8Source()._layout(process)
        assert layout is not None, "V8 not found in the recording"
        functions = _stack_functions(process, Names(process, layout))
    assert ("main", str(WORK)) in functions, functions
    assert {("optimized", str(WORK)), ("parsing", str(WORK))} & functions, functions
