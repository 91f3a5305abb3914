"""A walk whose last step lands in no mapping: a frame-pointer step through code without unwind
information that keeps another value in its frame pointer reads a return address from where no
frame is (here 0x10). That address is no frame: it is not shown, and the stack ends as cut
([truncated], counted in the profile's footer), as a stack past the frame limit does."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from ..conftest import compile_c
from .conftest import NO_FP_FLAGS, profile

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(platform.machine() != "x86_64", reason="the workload's leaf is x86-64 assembly")]
HERE = Path(__file__).resolve().parent


def test_a_return_address_in_no_mapping_is_cut_not_shown(build_dir, workloads):
    binary = compile_c(HERE / "workloads" / "garbage_frame.c", build_dir / "garbage_frame", *NO_FP_FLAGS)
    w = workloads([binary, "60"])
    result, profiler = profile([w.pid], seconds=3.0, frequency=199)
    # the condition is met: walks ended at an address in no mapping
    assert profiler.kernel_counters["end_no_mapping"] > 0, profiler.kernel_counters
    spins = [s for s in result.samples if any(f.name == "spin_rbp" for f in s.stack)]
    assert sum(s.value for s in spins) >= 50, [[f.name for f in s.stack] for s in result.samples][:5]
    user = [[f for f in s.stack if f.kind.name != "KERNEL"] for s in spins]
    made_up = [[(f.name, hex(f.address or 0)) for f in frames] for frames in user
               if any(f.address == 0x10 or (f.name == "[unknown]" and not f.module) for f in frames)]
    assert not made_up, made_up[:5]
    cut = sum(s.value for s, frames in zip(spins, user) if frames[-1].name == "[truncated]")
    assert cut >= 0.9 * sum(s.value for s in spins), user[:5]
    assert result.stats.truncated >= cut
