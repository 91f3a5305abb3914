"""`hotstack run profile_probe` and `hotstack run profile_offcpu`, run as a user would."""

from __future__ import annotations

import gzip
import re

import pytest

from hotstack.profile.pprof_pb2 import Profile as PprofProfile

from ..conftest import hotstack
from ..stack_totals import folded_stacks, totals_by_name
from .conftest import libc_path_of


def _folded_totals(text: str, names: tuple[str, ...]) -> dict[str, int]:
    return totals_by_name(folded_stacks(text), names)


@pytest.mark.root
@pytest.mark.shares
def test_profile_probe_folded_and_pprof(workloads, malloc_ratio, tmp_path):
    w = workloads([malloc_ratio, "20"])
    libc = libc_path_of(w.pid)
    r = hotstack("run", "profile_probe", "--map-fetch-interval", "0", "--probe", f"uprobe:{libc}:malloc", "--pid", str(w.pid),
                 "--timeout", "2", "-o", "folded")
    assert r.returncode == 0, r.stderr
    totals = _folded_totals(r.stdout, ("alloc_three", "alloc_one"))
    total = sum(totals.values())
    assert total > 5000 and abs(totals["alloc_three"] / total - 0.75) < 0.02, totals

    out = tmp_path / "probe.pb.gz"
    r = hotstack("run", "profile_probe", "--map-fetch-interval", "0", "--probe", f"uprobe:{libc}:malloc", "--pid", str(w.pid),
                 "--timeout", "1", "-o", "pprof", "--file", str(out))
    assert r.returncode == 0, r.stderr
    p = PprofProfile.FromString(gzip.decompress(out.read_bytes()))
    strings = list(p.string_table)
    assert [(strings[t.type], strings[t.unit]) for t in p.sample_type] == [("uprobe", "count")]
    assert (strings[p.period_type.type], strings[p.period_type.unit], p.period) == ("uprobe", "count", 1)
    assert sum(s.value[0] for s in p.sample) > 1000


@pytest.mark.root
@pytest.mark.shares
def test_profile_offcpu_folded(workloads, offcpu_split):
    w = workloads([offcpu_split])
    r = hotstack("run", "profile_offcpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "3", "-o", "folded")
    assert r.returncode == 0, r.stderr
    totals = _folded_totals(r.stdout, ("sleep_eight_ms", "wait_on_pipe"))
    both = sum(totals.values())
    assert both > 2.0e9 and abs(totals["sleep_eight_ms"] / both - 0.80) <= 0.07, totals


@pytest.mark.parametrize("args,expected", [
    (["profile_probe", "--probe", "fprobe:vfs_read"], "unknown probe type 'fprobe'"),
    (["profile_probe", "--probe", "uprobe:/no/such/binary:malloc"], "/no/such/binary: no such file"),
    (["profile_probe", "--probe", "uprobe:/proc/self/status:x"], "is not a usable ELF file"),
    (["profile_probe"], "needs at least one --probe"),
    (["profile_offcpu", "--off-cpu-threshold", "2"], "must be in (0, 1]"),
    (["profile_offcpu", "--comm", "x"], "--comm is a profile_cpu flag"),
])
def test_bad_input_is_one_line_and_exit_2(args, expected):
    r = hotstack("run", *args, "--timeout", "1")
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], r.stderr


@pytest.mark.root
def test_missing_symbol_and_kprobe_without_kernel_support_exit_2():
    import os

    libc = libc_path_of(os.getpid())
    r = hotstack("run", "profile_probe", "--map-fetch-interval", "0", "--probe", f"uprobe:{libc}:no_such_function_here", "--timeout", "1")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"uprobe:{libc}:no_such_function_here" in r.stderr and "no function" in r.stderr

    from hotstack.ebpf.links import pmu_available
    r = hotstack("run", "profile_probe", "--host", "--map-fetch-interval", "0", "--probe", "kprobe:vfs_read", "--timeout", "1", "-o", "folded")
    if pmu_available("kprobe") or r.returncode == 0:
        # kprobes, or (without them) the fentry fallback: either way the hits are recorded, with
        # vfs_read in their kernel stacks (the run itself reads files).
        assert r.returncode == 0, r.stderr
        assert "vfs_read_[k]" in r.stdout, r.stdout[-2000:]
    else:    # no kprobes and no fentry on this kernel: this one line
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "'kprobe:vfs_read'" in r.stderr and "CONFIG_KPROBES" in r.stderr, r.stderr


@pytest.mark.root
def test_profile_offcpu_footer_says_time_off_the_cpu(workloads, offcpu_split):
    """The off-CPU table's footer: its values are nanoseconds off the CPU, not samples at some Hz."""
    w = workloads([offcpu_split])
    r = hotstack("run", "profile_offcpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "2")
    assert r.returncode == 0, r.stderr
    footer = r.stdout.strip().splitlines()[-1]
    assert re.match(r"^\d+\.\d s off the CPU in [\d.]+s; \d+ distinct stacks", footer), footer
    assert " Hz" not in footer and "samples" not in footer, footer
