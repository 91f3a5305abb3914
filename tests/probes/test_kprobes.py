"""kprobe links: through kprobes or fentry where the kernel allows it, else one clear error at start."""

from __future__ import annotations

import os
import threading

import pytest

from hotstack.ebpf import links as ebpf_links
from hotstack.errors import HotstackError
from .conftest import probe_engine

pytestmark = pytest.mark.root


def _open_files(stop: threading.Event) -> None:
    while not stop.is_set():
        with open("/proc/self/stat", "rb") as f:
            f.read()


def _own_samples_while_opening_files(profiler) -> list:
    """This process's samples of a 1 s run of the started `profiler` while a thread opens files."""
    stop = threading.Event()
    worker = threading.Thread(target=_open_files, args=(stop,))
    worker.start()
    try:
        profile = profiler.run(1.0)
    finally:
        stop.set()
        worker.join()
        profiler.close()
    return [s for s in profile.samples if s.pid == os.getpid()]


def test_kprobe_attaches_where_the_kernel_can_else_names_the_missing_option():
    profiler = probe_engine(["kprobe:do_sys_openat2"])
    try:
        profiler.start()
    except HotstackError as e:
        message = str(e)
        assert not ebpf_links.pmu_available("kprobe"), "kprobes exist, yet the link failed: " + message
        assert "'kprobe:do_sys_openat2'" in message and "CONFIG_KPROBES" in message, message
        assert "\n" not in message
        profiler.close()
        return
    ours = _own_samples_while_opening_files(profiler)
    assert sum(s.value for s in ours) > 100
    kernel_names = {f.name for s in ours for f in s.stack if f.is_kernel}
    assert kernel_names & {"do_sys_openat2", "__x64_sys_openat", "do_syscall_64"}, kernel_names


def test_unknown_kernel_function_fails_at_start():
    profiler = probe_engine(["kretprobe:no_such_kernel_function_xyz"])
    with pytest.raises(HotstackError) as e:
        profiler.start()
    profiler.close()
    assert "'kretprobe:no_such_kernel_function_xyz'" in str(e.value)
    assert "no_such_kernel_function_xyz" in str(e.value)


def test_kprobe_without_kernel_stacks_has_no_kernel_frames():
    """EngineConfig.kernel_stacks off (pyroscope.ebpf's kernel_frames = false) holds for kernel
    probes too, whose program takes a kernel stack where the probed function runs."""
    from hotstack.sampling import Engine, EngineConfig
    from hotstack.sampling.probe_links import parse_probe_links
    if not ebpf_links.pmu_available("kprobe"):
        pytest.skip("no kprobes on this kernel (the kernel matrix has them)")
    profiler = Engine(EngineConfig(cpu=False, kernel_stacks=False,
                                   probe_links=tuple(parse_probe_links(["kprobe:do_sys_openat2"]))))
    profiler.start()
    ours = _own_samples_while_opening_files(profiler)
    assert sum(s.value for s in ours) > 100
    assert not [f.name for s in ours for f in s.stack if f.is_kernel]
    assert any(s.stack for s in ours)   # the user frames stay
