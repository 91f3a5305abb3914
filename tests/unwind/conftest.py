from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ..conftest import compile_c

HERE = Path(__file__).resolve().parent
NO_FP_FLAGS = ("-O2", "-fomit-frame-pointer", "-pthread")


@pytest.fixture(scope="session")
def chain(build_dir) -> Path:
    """main -> a -> b -> c without frame pointers (modes: busy, syscall, signal, threads, jit)."""
    return compile_c(HERE / "workloads" / "chain.c", build_dir / "chain_nofp", *NO_FP_FLAGS)


@pytest.fixture(autouse=True)
def unwind_cache(tmp_path_factory, monkeypatch):
    """Tables are parsed in the test, not loaded from a cache of an earlier run."""
    monkeypatch.setenv("HOTSTACK_UNWIND_CACHE", str(tmp_path_factory.mktemp("unwind-cache")))


def profile(pids: list[int], seconds: float = 3.0, unwind: str = "kernel", frequency: int = 99):
    """Sample `pids` for `seconds` with the real profiler; returns (profile, profiler). The kernel
    unwinder's counters at the end are in profiler.kernel_counters ({} with --unwind fp), where its
    tables came from in profiler.table_sources."""
    from hotstack.sampling import Engine, EngineConfig

    profiler = Engine(EngineConfig(frequency=frequency, pids=tuple(pids), unwind=unwind, runtime_frames=False))
    with profiler:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.1)
        result = profiler.collect()[0]
        native = profiler.cpu.native
        profiler.kernel_counters = native.kernel_counters() if native is not None else {}
        profiler.table_sources = [t.source for t in native.cache._tables.values()] if native is not None else []
    return result, profiler


def user_names(sample) -> list[str]:
    """User frame names, root first."""
    return [f.name for f in reversed(sample.stack) if f.kind.name != "KERNEL"]


def on_overlay(tmp_path: Path, files: dict[str, Path]) -> tuple[list[str], Path, Path]:
    """An overlay filesystem (a container's files) whose lower layer holds `files` (name -> source),
    mounted in a mount namespace of its own: (the argv prefix that mounts it and runs what follows
    inside, the merged directory, the lower layer). Skips where it cannot be mounted."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    layers = {name: tmp_path / name for name in ("lower", "upper", "work", "merged")}
    for d in layers.values():
        d.mkdir()
    for name, source in files.items():
        shutil.copy(source, layers["lower"] / name)
    mount = (f"mount -t overlay overlay -o lowerdir={layers['lower']},upperdir={layers['upper']},"
             f"workdir={layers['work']} {layers['merged']}")
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", f'{mount} && exec "$@"', "sh"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no overlay mount here: {probe.stderr.strip()}")
    return prefix, layers["merged"], layers["lower"]
