"""The kernel unwinder's tables of a process recorded into a directory (procs.record), then ended:
every file it maps executable is found in the recording's maps, opened through the recording (its
copy) and its table built and loaded into the kernel's maps, with no /proc of the process read."""

from __future__ import annotations

import subprocess
import time

import pytest

from hotstack import procs
from hotstack.unwind.kernel_files import exec_mappings
from tests.procs.recording import no_proc, record_and_end

from .native_harness import NativeSampler
from .test_kernel_unwind import native_object  # noqa: F401 (the fixture)

pytestmark = pytest.mark.root


def test_tables_of_a_recorded_process_load_from_the_recording(native_object, chain, tmp_path, monkeypatch):  # noqa: F811
    child = subprocess.Popen([str(chain), "busy"])

    def stop() -> None:
        child.kill()
        child.wait()

    try:
        time.sleep(0.3)       # (its libraries mapped, in its loop)
        directory = record_and_end(child.pid, tmp_path / "rec", stop)
    finally:
        stop()
    sampler = NativeSampler(native_object)
    try:
        with no_proc(monkeypatch):
            process = procs.RecordedProcess(directory)
            files = {(ino, dev): path for _s, _e, _o, ino, dev, path in exec_mappings(process) if ino}
            preloaded = sampler.tables.preload_process(process)
        loaded = {key: sampler.tables.loaded[key] for key in files if key in sampler.tables.loaded}
    finally:
        sampler.close()
    # the workload, the C library and the loader at least; each by its path, with rows
    assert len(files) >= 3 and str(chain) in files.values(), files
    assert preloaded == len(files), (preloaded, files)
    assert {key: entry.path for key, entry in loaded.items()} == files
    assert all(entry.count > 0 for entry in loaded.values()), loaded
