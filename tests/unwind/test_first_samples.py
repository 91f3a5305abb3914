"""The first samples of a file: tables the kernel unwinder needs before it first meets their file.

A shell's child runs the shell's code between its fork and its exec. The kernel queues the shell's
file at the child's first sample there, but the child has exec'd by the time userspace opens the
file through its mapping, and the shell itself (which waits) is rarely sampled, so no path of the
file was known: it went without a table, and those samples short, until a child happened to be
caught before its exec (5 s under a loop of `xz` runs). The file is now opened through the child's
parent. And the dynamic loader and the C library, which nearly every process maps, have their
tables loaded as sampling begins: the loader runs only in a process's first milliseconds, and the
kernel had met it 13 s into a loop of short commands."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ..conftest import at_most, compile_c
from .conftest import on_overlay, user_names

pytestmark = pytest.mark.root

HERE = Path(__file__).resolve().parent


def _key(path: str) -> tuple[int, int]:
    from hotstack.unwind.kernel_files import kernel_dev

    st = os.stat(path)
    return st.st_ino, kernel_dev(st.st_dev)


@pytest.mark.parametrize("filesystem", ["plain", "overlay"])
def test_a_forked_childs_file_is_opened_through_its_parent(build_dir, workloads, filesystem, tmp_path):
    """Also on an overlay (a container's shell), where the parent's maps show the overlay's device
    and the kernel the layer's: the parent's mapping at the child's addresses (a fork keeps them)."""
    from hotstack.sampling import Engine, EngineConfig

    forker = compile_c(HERE / "workloads" / "forker.c", build_dir / "forker", "-O2", "-fomit-frame-pointer")
    prefix, run = [], forker
    if filesystem == "overlay":
        prefix, merged, lower = on_overlay(tmp_path, {"forker": forker})
        run, forker = merged / "forker", lower / "forker"     # (the kernel knows the layer's file)
    # ~1 ms in the parent's code, then the child is `sleep`: long before userspace reads the queue
    workloads([*prefix, run, "1000", "1.0"], settle=1.0)
    engine = Engine(EngineConfig(frequency=499, comms=("forker",), unwind="kernel", runtime_frames=False))
    loaded_at = None
    with engine:
        native = engine.cpu.native
        began = time.monotonic()
        deadline = began + 8.0
        while time.monotonic() < deadline and loaded_at is None:
            time.sleep(0.1)
            if _key(str(forker)) in native.loaded:
                loaded_at = time.monotonic()
        time.sleep(2.0)
        engine.collect()            # (the samples before the table)
        # at least 3 s, and on until the children's own code has samples enough for the bound
        # below, whatever CPU they get on a busy machine
        ours, others = [], []
        until = time.monotonic() + 3.0
        while time.monotonic() < until or (sum(s.value for s in ours) < 60 and time.monotonic() < until + 60):
            time.sleep(0.5)
            for s in engine.collect()[0].samples:
                (ours if "before_exec" in user_names(s) else others).append(s)
    # (without its parent: 1.2-4.9 s here, after 5-30 opens that found the child exec'd)
    assert loaded_at is not None and loaded_at - began < 1.0, (loaded_at and loaded_at - began, native.counters)
    assert native.counters.files_failed == 0, native.counters
    total = sum(s.value for s in ours)
    assert total >= 60, [user_names(s) for s in others][:10]
    # every stack whole: a rate of 1 in 100 short ones passes within three standard deviations
    short = sum(s.value for s in ours if user_names(s)[0] != "_start")
    assert short <= at_most(total, 0.01), [user_names(s) for s in ours if user_names(s)[0] != "_start"]


def test_the_loader_and_c_library_are_loaded_as_sampling_begins():
    """Before any process of them is sampled (no process has the comm sampled)."""
    from hotstack.sampling import Engine, EngineConfig
    from hotstack.unwind.kernel_files import exec_mappings
    from hotstack.unwind.kernel_maps import SHARED_FILES

    shared = {(ino, dev): path for _s, _e, _o, ino, dev, path in exec_mappings(os.getpid())
              if ino and SHARED_FILES.match(os.path.basename(path))}
    assert any("ld-" in path for path in shared.values()) and any("libc" in path for path in shared.values()), shared
    engine = Engine(EngineConfig(frequency=99, comms=("no-such-comm",), unwind="kernel", runtime_frames=False))
    with engine:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not set(shared) <= set(engine.cpu.native.loaded):
            time.sleep(0.05)
        loaded = set(engine.cpu.native.loaded)
    assert set(shared) <= loaded, (shared, loaded)
