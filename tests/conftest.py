"""Shared fixtures: real workloads built in the test, run as root against the real kernel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = Path(__file__).resolve().parent / "workloads"


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root: eBPF tests load real programs")
    for item in items:
        if os.geteuid() != 0 and "root" in item.keywords:
            item.add_marker(skip)
        # A test that measures shares of samples or wall-clock time on a real, possibly busy,
        # machine runs once more when it fails; every other test (exact counts above all) never
        # does, so that a race cannot pass on a second try.
        if item.get_closest_marker("shares") is not None:
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=2))


def pytest_configure(config):
    config.addinivalue_line("markers", "root: needs root and a kernel with eBPF")
    config.addinivalue_line("markers", "shares: measures shares of samples or time; rerun once on failure")


@pytest.fixture
def cli(capsys):
    """The CLI's `main()` in this process: the same code path as a user's, minus interpreter start-up."""
    from types import SimpleNamespace
    from hotstack.cli import main

    def run(*args: str):
        code = main(list(args))
        out, err = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)
    return run


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build")


def compile_c(source: Path, out: Path, *flags: str, compiler: str = "cc") -> Path:
    subprocess.run([compiler, *flags, str(source), "-o", str(out)], check=True)
    return out


# Frame pointers everywhere, leaves included (Debian's gcc omits them in leaf functions otherwise,
# which hides the leaf's caller from any frame-pointer unwinder, perf's included).
FP_FLAGS = ("-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer")


def built_workload(directory: Path, name: str, *flags: str, binary: str | None = None):
    """A session fixture named `binary` (by default `name`): directory/workloads/NAME.c built once,
    with frame pointers everywhere and `flags`."""
    @pytest.fixture(scope="session", name=binary or name)
    def build(build_dir) -> Path:
        return compile_c(directory / "workloads" / f"{name}.c", build_dir / (binary or name), *FP_FLAGS, *flags)
    return build


class Workload:
    """A process started by a test and always stopped by it (by pid)."""

    def __init__(self, argv: list[str], **kw) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
        self.pid = self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def stop_gently(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to `proc` (by its pid) if it still runs; SIGKILL if it has not ended `timeout` s later."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_ready(proc: subprocess.Popen, ready, what: str, log, timeout: float) -> None:
    """Until ready() is true (an OSError counts as not yet) while `proc` runs; fails with the tail of
    log() when `what` exits first or is not ready within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited ({proc.returncode}): {log()[-4000:]}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what} not ready within {timeout} s: {log()[-4000:]}")


class ReadyProcess:
    """A program started by a test that prints one line of JSON when ready (its `info`); stopped by
    its pid."""

    def __init__(self, argv: list[str], stdin: bool = False) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.PIPE if stdin else None, text=True)
        self.pid = self.proc.pid
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{argv[0]} did not start: {self.proc.stderr.read()[-2000:]}")
        self.info = json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def workloads():
    started: list[Workload] = []

    def start(argv: list[str], settle: float = 0.2, **kw) -> Workload:
        w = Workload([str(a) for a in argv], **kw)
        started.append(w)
        time.sleep(settle)
        return w

    yield start
    for w in started:
        w.stop()


def hotstack(*args: str, timeout: float = 120, env: dict | None = None, prefix: list[str] | None = None):
    """Run the CLI as a separate process, as a user would."""
    cmd = [*(prefix or []), sys.executable, "-m", "hotstack", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def at_most(n: int, rate: float, sigmas: float = 3.0) -> float:
    """The most events that `n` samples of a true `rate` show, but for a chance of a few in a
    thousand (`sigmas` standard deviations of the binomial count above its mean): a bound on a
    count of rare events that holds on a busy machine and still fails at a rate several times
    higher, given samples enough (n * rate of a few or more)."""
    return n * rate + sigmas * (n * rate * (1 - rate)) ** 0.5


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def wait_for(predicate, timeout: float = 20.0, every: float = 0.1):
    """The first true value of predicate(), asked every `every` seconds for `timeout` seconds; past
    that, its value then (false unless it came true at the last moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return predicate()


def wait_until_sampling(pid: int, timeout: float = 30) -> None:
    """Block until process `pid` has opened its perf events (so sampling has begun)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            raise AssertionError(f"process {pid} exited before sampling started") from None
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]":
                    time.sleep(0.2)   # all CPUs' events are opened and enabled together
                    return
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not start sampling within {timeout} s")


# Real container runtimes (dockerd, containerd's CRI) for the tests that need them.
from .runtime_fixtures import (  # noqa: E402,F401
    _containerd_session, _docker_engine_session, containerd_cri, docker_engine, spin_image, static_spin)
