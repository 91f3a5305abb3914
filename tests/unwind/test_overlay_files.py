"""A process whose files are on an overlay (a container's image): /proc/PID/maps and map_files
show the overlay's device, the kernel unwinder reads the layer's file under it. Its tables are
still found, opened through the process's mapping, and its stacks complete."""

from __future__ import annotations

import pytest

from .conftest import on_overlay, profile, user_names

pytestmark = pytest.mark.root


def test_a_program_on_an_overlay_is_unwound_in_the_kernel(chain, workloads, tmp_path):
    prefix, merged, _lower = on_overlay(tmp_path, {"chain": chain})
    w = workloads([*prefix, merged / "chain", "busy"], settle=0.5)
    result, profiler = profile([w.pid], seconds=3.0)
    in_c = [s for s in result.samples if user_names(s)[-1:] == ["c"]]
    total = sum(s.value for s in in_c)
    whole = sum(s.value for s in in_c if user_names(s)[-4:] == ["main", "a", "b", "c"])
    assert total > 100, (total, profiler.kernel_counters)
    # (without its table, built from the file opened through the process's mapping, every walk
    # ends at c: chain is built without frame pointers; the first ~0.1 s, until it is built, do)
    assert whole >= 0.95 * total, f"{whole} of {total} complete; kernel {profiler.kernel_counters}"
