from __future__ import annotations

import ctypes.util
import os
import subprocess
from pathlib import Path

import pytest

from ..conftest import built_workload

HERE = Path(__file__).resolve().parent
malloc_ratio = built_workload(HERE, "malloc_ratio")
offcpu_split = built_workload(HERE, "offcpu_split")
long_sleep = built_workload(HERE, "long_sleep")
two_spinners = built_workload(HERE, "two_spinners", "-pthread")


@pytest.fixture
def obi_map(tmp_path):
    """OBI's traces_ctx_v1 map, created and pinned as OBI pins it, under a bpffs mounted for the test.

    Yields (bpf_fs_root, set_span(pid, tid, trace_id, span_id)).
    """
    from hotstack.ebpf import Map, MapSpec
    from hotstack.ebpf.pinning import pin

    root = tmp_path / "bpffs"
    root.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(root)], check=True)
    m = Map.create(MapSpec("traces_ctx_v1", 9, 8, 24, 1 << 14))   # BPF_MAP_TYPE_LRU_HASH
    try:
        (root / "otel").mkdir(mode=0o700)
        pin(m.fd, str(root / "otel" / "traces_ctx_v1"))

        def set_span(pid: int, tid: int, trace_id: bytes, span_id: bytes) -> None:
            m.update(((pid << 32) | tid).to_bytes(8, "little"), trace_id + span_id)

        yield str(root) + "/", set_span
    finally:
        m.close()
        subprocess.run(["umount", str(root)], check=False)


def thread_ids(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def libc_path_of(pid: int) -> str:
    """The libc that process `pid` really maps (the seed's /usr/lib/libc.so.6, adapted to this machine)."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if os.path.basename(path).startswith("libc.so"):
                return path
    name = ctypes.util.find_library("c")
    raise AssertionError(f"process {pid} maps no libc (find_library: {name})")


def stack_names(sample) -> list[str]:
    return [f.name for f in sample.stack]


def probe_engine(links, pids=(), obi=None):
    """The engine with only the probe sampler, as `hotstack run profile_probe` builds it."""
    from hotstack.sampling import Engine, EngineConfig
    from hotstack.sampling.probe_links import parse_probe_links
    return Engine(EngineConfig(cpu=False, probe_links=tuple(parse_probe_links(links)), pids=tuple(pids), obi=obi))


def offcpu_engine(threshold=1.0, pids=(), obi=None):
    """The engine with only the off-CPU sampler, as `hotstack run profile_offcpu` builds it."""
    from hotstack.sampling import Engine, EngineConfig
    return Engine(EngineConfig(cpu=False, off_cpu_threshold=threshold, pids=tuple(pids), obi=obi))
