"""`hotstack run` flag defaults as Inspektor Gadget's `ig run` has them."""

from __future__ import annotations

import re
import sys

import pytest

from hotstack.cli import build_parser

from ..conftest import hotstack


def test_map_fetch_interval_defaults_to_igs_1000ms():
    args = build_parser("run").parse_args(["run", "profile_cpu"])
    assert args.map_fetch_interval == "1000ms"
    assert args.map_fetch_count == 0   # ig: no limit


def test_scope_defaults_to_igs_containers_only():
    """ig run without --host: only processes in containers (hotstack.gadget.scope)."""
    from hotstack.gadget.run import RunOptions

    args = build_parser("run").parse_args(["run", "profile_cpu"])
    assert args.host is False and RunOptions.from_args(args).host is False
    assert RunOptions.from_args(build_parser("run").parse_args(["run", "profile_cpu", "--host"])).host is True


@pytest.mark.root
@pytest.mark.shares
def test_without_the_flag_a_table_comes_every_second(workloads):
    """As `ig run profile_cpu`: a delta table each second, then the final flush at --timeout."""
    w = workloads([sys.executable, "-c", "while True: pass"])
    r = hotstack("run", "profile_cpu", "--pid", str(w.pid), "--timeout", "3.5", "--sample-rate", "50")
    assert r.returncode == 0, r.stderr
    footers = re.findall(r"^(\d+) samples in ([\d.]+)s at 50 Hz", r.stdout, re.M)
    # 3 fetches at 1, 2, 3 s and the flush at 3.5 s; on a loaded machine a fetch may come late, but
    # there is more than the one table that --map-fetch-interval 0 prints, and short windows.
    assert 2 <= len(footers) <= 4, r.stdout[-2000:]
    assert min(float(d) for _, d in footers) <= 2.0, footers


@pytest.mark.root
def test_map_fetch_interval_0_still_gives_one_table_at_the_end(workloads):
    w = workloads([sys.executable, "-c", "while True: pass"])
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "2",
                 "--sample-rate", "50")
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"^\d+ samples in [\d.]+s at 50 Hz", r.stdout, re.M)) == 1, r.stdout[-2000:]
