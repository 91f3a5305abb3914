"""A library unloaded and another loaded at its address (a plugin host): from then on the same
addresses are the other file's code. The kernel unwinder reads a cached mapping again under a new
address-space stamp and, finding another file there, tells userspace (nu_remap); userspace reads the
process's maps again and names each stack with the mappings its hash says the kernel walked it in
(the ones read now or those before). Before, one library's samples were named as the other's
functions: the maps read first named every address, and /proc/PID/map_files opened whichever file
was mapped there at naming time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ..conftest import compile_c
from .conftest import on_overlay, profile, user_names

pytestmark = pytest.mark.root

HERE = Path(__file__).resolve().parent
OURS = {"a_hot": "run_a", "a_pad": "run_a", "b_hot": "run_b", "b_pad": "run_b"}


@pytest.fixture(scope="module")
def swap_libs(build_dir) -> dict[str, Path]:
    """The host, libswap_a.so, and libswap_b.so of the same page counts and (padded) of others."""
    workloads = HERE / "workloads"
    shared = ("-O1", "-shared", "-fPIC")
    return {"host": compile_c(workloads / "swap_libs.c", build_dir / "swap_libs", "-O1", "-fno-omit-frame-pointer"),
            "a": compile_c(workloads / "swap_a.c", build_dir / "libswap_a.so", *shared),
            "b": compile_c(workloads / "swap_b.c", build_dir / "libswap_b.so", *shared),
            "b padded": compile_c(workloads / "swap_b.c", build_dir / "libswap_b_pad.so", *shared, "-DSWAP_PAD")}


@pytest.mark.parametrize("second", ["b", "b padded"])
def test_a_library_loaded_where_another_was_is_named_as_itself(swap_libs, second, workloads, tmp_path):
    named_as_itself(swap_libs[second], swap_libs, workloads, tmp_path)


def named_as_itself(second: Path, swap_libs, workloads, tmp_path) -> None:
    """The plugin host swapping libswap_a.so and `second` at one address every 0.3 s, profiled 5 s:
    each library's samples named as its own code, both libraries' hot functions in the profile."""
    report = tmp_path / "addresses"
    w = workloads([swap_libs["host"], swap_libs["a"], second, "0.3", report], settle=0.8)
    at = report.read_text().split()
    assert len(at) == 2 and at[0] == at[1], f"b_hot is not where a_pad was: {at}"
    result, profiler = profile([w.pid], seconds=5.0)
    by_fn: dict[str, int] = {}
    wrong = []
    total = 0
    for s in result.samples:
        names = user_names(s)
        total += s.value
        for fn, caller in OURS.items():
            if fn in names:
                by_fn[fn] = by_fn.get(fn, 0) + s.value
                # run_X -> run_lib -> X_hot: the library's function under the other library's caller
                # is an address named with the other file
                if caller not in names:
                    wrong.append((s.value, names[-6:]))
    assert not wrong, f"named as the other library's code: {wrong[:5]}"
    assert profiler.kernel_counters["remapped"] > 0
    # each phase is half the time: both libraries' hot functions are named (else what the others were
    # named, and the kernel's counters: the test has failed now and then in batch runs, a_hot at 0)
    others = Counter(tuple(user_names(s)[-7:]) for s in result.samples
                     if not {"a_hot", "b_hot"} & set(user_names(s)) for _ in range(s.value))
    assert by_fn.get("a_hot", 0) > 0.25 * total and by_fn.get("b_hot", 0) > 0.25 * total, \
        f"{by_fn} of {total}; others {others.most_common(4)}; kernel {profiler.kernel_counters}"


def test_userspace_computes_the_kernels_stack_hash(chain, workloads):
    """file_stack_hash (what naming checks a remapped process's stacks with) is the kernel's own key
    for a stack of files: equal for every such stack of a process whose mappings did not change."""
    from hotstack.sampling import Engine, EngineConfig
    from hotstack.unwind.kernel_files import file_stack_hash

    w = workloads([chain, "busy"])
    engine = Engine(EngineConfig(frequency=199, pids=(w.pid,), unwind="kernel", runtime_frames=False))
    batches = []
    real = engine.to_profile
    engine.to_profile = lambda sampler, batch: batches.append(batch) or real(sampler, batch)
    # (user_hash: set only for a stack the kernel hashed by file, struct nu_stack.by_file)
    def hashed():
        return [r for batch in batches for r in batch.stacks if r.pid == w.pid and r.user_hash]

    with engine:
        time.sleep(1.0)
        engine.collect()
        batches.clear()
        # collected until there are samples enough, whatever CPU the workload gets on a busy machine
        deadline = time.monotonic() + 180
        while sum(r.value for r in hashed()) < 200 and time.monotonic() < deadline:
            time.sleep(0.5)
            engine.collect()
        mappings = engine.processes.get(w.pid).mappings
    stacks = hashed()
    assert sum(r.value for r in stacks) >= 200
    same = sum(r.value for r in stacks if file_stack_hash(mappings, r.user_stack, r.user_end) == r.user_hash)
    assert same == sum(r.value for r in stacks)


# Maps each file given, in turn, at the first one's addresses (its first page, executable; MAP_FIXED
# for the others), printing the range and waiting for a line between: a swap on cue.
REMAP_AT = """
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
at = None
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    at = libc.mmap(at, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC,
                   mmap.MAP_PRIVATE | (0x10 if at else 0), fd, 0)    # (0x10: MAP_FIXED)
    os.close(fd)
    print("%x %x" % (at, at + mmap.PAGESIZE), flush=True)
    sys.stdin.readline()
"""


def kernel_key(path: Path) -> tuple[int, int]:
    """What the kernel unwinder knows a file by (its inode, and its filesystem's device)."""
    from hotstack.unwind.kernel_files import kernel_dev

    st = os.stat(path)
    return st.st_ino, kernel_dev(st.st_dev)


def swapped_at_one_address(argv: list[str], a: Path, b: Path) -> None:
    """Run argv (mapping a, then b at a's addresses), checking what open_mapped opens for each file's
    kernel key before and after the swap."""
    from hotstack.unwind.kernel_files import open_mapped

    def opened(key):
        fd = open_mapped(proc.pid, start, end, key)
        if fd is None:
            return None
        try:
            return os.read(fd, 1 << 20)
        finally:
            os.close(fd)

    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        start, end = (int(x, 16) for x in proc.stdout.readline().split())
        assert opened(kernel_key(a)) == a.read_bytes()
        assert opened(kernel_key(b)) is None
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert [int(x, 16) for x in proc.stdout.readline().split()] == [start, end]
        # the kernel met a's code there; map_files opens b now: not a's file
        assert opened(kernel_key(a)) is None
        assert opened(kernel_key(b)) == b.read_bytes()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_file_swapped_at_its_addresses_is_not_opened_for_the_one_the_kernel_met(swap_libs):
    """The kernel queues a file for a table by (inode, device) and the addresses it met it at; by the
    time userspace opens /proc/PID/map_files for those addresses, another library of the same size
    may be mapped there (the plugin host above: its table built from the other file had every stack
    of the first end after one bogus frame, now and then in batch runs)."""
    swapped_at_one_address([sys.executable, "-c", REMAP_AT, swap_libs["a"], swap_libs["b"]],
                            swap_libs["a"], swap_libs["b"])



def test_a_file_on_an_overlay_swapped_at_its_addresses(swap_libs, tmp_path):
    """The same on an overlay (a container's files): the process's maps and map_files show the
    overlay's device, the kernel unwinder reads the layer's under it; the inode tells them apart."""
    from hotstack.unwind.kernel_files import kernel_dev

    prefix, merged, lower = on_overlay(tmp_path, {"liba.so": swap_libs["a"], "libb.so": swap_libs["b"]})
    shown = subprocess.run([*prefix, "stat", "-c", "%d", merged / "liba.so"], capture_output=True, text=True)
    # (what makes this case: the device the process's view shows is not the layer's)
    assert kernel_dev(int(shown.stdout)) != kernel_key(lower / "liba.so")[1]
    swapped_at_one_address([*prefix, sys.executable, "-c", REMAP_AT, merged / "liba.so", merged / "libb.so"],
                           lower / "liba.so", lower / "libb.so")


def test_where_the_mappings_made_cannot_be_counted_the_unwinder_goes_on(chain, workloads, monkeypatch, caplog):
    """A kernel without mm_lock_seq is given bpf/mappings.bpf.c (its vma_store tracepoint, 6.1-6.3);
    where that cannot load (here: this kernel has mm_lock_seq and no such tracepoint, taken as one
    without it) the swap it would tell goes unseen, said once, and stacks are unwound as before."""
    import logging

    from hotstack.unwind import kernel_config

    monkeypatch.setattr(kernel_config, "has_mm_lock_seq", lambda: False)
    w = workloads([chain, "busy"])
    with caplog.at_level(logging.INFO, logger="hotstack"):
        result, profiler = profile([w.pid], seconds=2.0)
    assert profiler.cpu._mapped is None
    assert [r.message for r in caplog.records if "same page counts goes unseen" in r.message]
    whole = sum(s.value for s in result.samples if user_names(s)[-4:] == ["main", "a", "b", "c"])
    assert whole > 0.9 * sum(s.value for s in result.samples), profiler.kernel_counters
