"""A process whose maps were read before it mapped the code it then runs (a new process read at
its first samples, before its loader or a dlopen() mapped its libraries): a frame in no mapping of
those maps has them read again at once, not a second later (`sleep`: the process still runs at
naming); a process gone by then (`exit`) has the maps read last completed with the mappings the
kernel unwinder kept for it (those it walked its stacks in)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from ..conftest import compile_c

pytestmark = pytest.mark.root
HERE = Path(__file__).resolve().parent
FLAGS = ("-O2", "-fno-omit-frame-pointer")


def _user(sample) -> list[str]:
    return [f.name for f in sample.stack if f.kind.name != "KERNEL"]


@pytest.mark.parametrize("then", ["sleep", "exit"])
def test_a_library_mapped_after_the_first_read_is_named(build_dir, workloads, then, tmp_path):
    from hotstack.sampling import Engine, EngineConfig

    lib = compile_c(HERE / "workloads" / "late_spin.c", build_dir / "liblate_spin.so", *FLAGS, "-shared", "-fPIC")
    exe = compile_c(HERE / "workloads" / "late_lib.c", build_dir / f"late_lib_{then}", *FLAGS, "-ldl")
    engine = Engine(EngineConfig(frequency=499, comms=(exe.name,), runtime_frames=False))
    go = tmp_path / "go"
    with engine:
        engine.collect()
        # main spins until its maps were read (without the library), then the library's function
        # 0.5 s: its samples are named within a second of that read (MAPS_REFRESH_S)
        w = workloads([exe, str(lib), str(go), "0.5", then], settle=0.0)
        deadline = time.monotonic() + 30
        while engine.processes.peek(w.pid) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        read = engine.processes.peek(w.pid)
        go.touch()
        time.sleep(0.6)
        first_read = read is not None and not read.lazy and not any(m.path == str(lib) for m in read.mappings.mappings)
        samples = [s for p in engine.collect() for s in p.samples if s.pid == w.pid and _user(s)]
    assert first_read, "the process was not read before it loaded the library"
    spins = sum(s.value for s in samples if "main_spin" not in _user(s))
    named = sum(s.value for s in samples if "late_spin" in _user(s))
    # (a sample in the library shows late_spin or late_now, under main)
    assert spins >= 40, Counter(tuple(_user(s)) for s in samples).most_common(5)
    assert named >= 0.9 * spins, Counter(tuple(_user(s)) for s in samples).most_common(5)
