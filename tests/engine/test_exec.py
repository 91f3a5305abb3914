"""A process that execs keeps its pid (and often its comm): its samples are named from the new
image's maps, not the old one's (issue 18, item 2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from ..conftest import compile_c, wait_until_sampling
from ..stack_totals import folded_stacks

pytestmark = pytest.mark.root

HERE = Path(__file__).resolve().parent
FLAGS = ("-O1", "-fno-omit-frame-pointer", "-fPIE", "-pie")   # PIE: each exec gets its own base


@pytest.fixture(scope="module")
def exec_binaries(build_dir):
    source = HERE / "workloads" / "exec_image.c"
    (build_dir / "first").mkdir(exist_ok=True)
    (build_dir / "second").mkdir(exist_ok=True)
    return {"self": compile_c(source, build_dir / "reexec", *FLAGS),
            "first": compile_c(source, build_dir / "first" / "exA", *FLAGS, "-DFIRST"),
            "second": compile_c(source, build_dir / "second" / "exA", *FLAGS, "-DSECOND")}


def profile_across_exec(argv: list[str]) -> list[tuple[list[str], int]]:
    """Folded stacks of `argv`'s process: ~1 s in its first image, then ~3 s in the next one."""
    workload = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        profiler = subprocess.Popen([sys.executable, "-m", "hotstack", "run", "profile_cpu", "--pid",
                                     str(workload.pid), "--timeout", "5", "--sample-rate", "199",
                                     "--map-fetch-interval", "500ms", "-o", "folded"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until_sampling(profiler.pid)
            time.sleep(1.0)
            os.kill(workload.pid, signal.SIGUSR1)
            out, err = profiler.communicate(timeout=120)
        finally:
            if profiler.poll() is None:
                profiler.kill()
        assert profiler.returncode == 0, err
    finally:
        workload.kill()
        workload.wait()
    return folded_stacks(out)


def share(lines, leaf: str) -> float:
    total = sum(c for _, c in lines)
    return sum(c for frames, c in lines if frames[-1] == leaf) / max(1, total)


@pytest.mark.shares
def test_self_reexec_with_aslr_is_named_after_the_exec(exec_binaries):
    """The same executable again (same path, comm and inode, another load address)."""
    lines = profile_across_exec([str(exec_binaries["self"])])
    assert {frames[0] for frames, _ in lines} == {"reexec"}, lines[:5]   # the comm never changed
    assert sum(c for _, c in lines) > 50, lines
    after = share(lines, "after_reexec")
    unknown = share(lines, "[unknown]")
    # ~3 s of 4 after the exec; before the fix nearly all of them were [unknown].
    assert after >= 0.5 and unknown <= 0.1, (after, unknown, lines[:5])
    assert share(lines, "in_prog_A") > 0.05, lines[:5]   # the first image was sampled and named too


@pytest.mark.shares
def test_exec_of_another_binary_with_the_same_comm(exec_binaries):
    """Another executable with the same name: the new program's symbols, not the old one's."""
    lines = profile_across_exec([str(exec_binaries["first"]), str(exec_binaries["second"])])
    assert {frames[0] for frames, _ in lines} == {"exA"}, lines[:5]   # the comm never changed
    b = share(lines, "in_prog_B_other")
    assert b >= 0.5, (b, lines[:5])
    assert share(lines, "in_prog_A") < 0.5, lines[:5]


def _user(sample) -> list:
    return [f for f in sample.stack if f.kind is not FrameKind.KERNEL]


def test_a_process_that_re_execs_itself_every_few_hundred_ms_is_named(build_dir):
    """A process that execs itself again every ~0.28 s (issue 47, item 4), collected after it
    ended: every image's samples are named with that image's mappings (each a new load address),
    not only the last one's."""
    prog = compile_c(HERE / "workloads" / "reexec_loop.c", build_dir / "reexecloop", *FLAGS)
    with Engine(EngineConfig(frequency=199)) as prof:
        prof.collect()
        subprocess.run([str(prog), "0", "16"], check=True, timeout=60)    # 16 images, ~4.5 s
        time.sleep(0.3)
        samples = [s for s in prof.collect()[0].samples if s.comm == prog.name]
    total = sum(s.value for s in samples)
    assert total >= 30, total      # ~199 a second for ~4.5 s, far fewer on a loaded machine

    def named(sample) -> bool:
        user = _user(sample)
        return bool(user) and all(f.resolved for f in user) and any(f.name.startswith("reexec_") for f in user)
    good = sum(s.value for s in samples if named(s))
    assert good >= 0.9 * total, (good, total, [[f.name for f in s.stack] for s in samples if not named(s)][:5])
