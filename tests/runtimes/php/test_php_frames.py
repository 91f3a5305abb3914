"""PHP frames through the real BPF sampler, against the distribution's php-cli (8.2 on Debian 12).

Ground truth is the split the script is built to have (75/25 of its CPU time): no independent PHP
sampling profiler installs from a package registry here."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from hotstack.procs import ProcessTable
from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig
from hotstack.symbols.symbolizer import Symbolizer
from hotstack.runtimes.php.detect import detect
from hotstack.runtimes.php.source import ZEND_OP_SIZE
from hotstack.procs import LiveProcess
from tests.peers import require_tool
from tests.runtime_fixtures import runtime_source

from source_lines import function_lines

pytestmark = pytest.mark.root

WORKLOAD = Path(__file__).resolve().parent / "workload.php"
_PROCESSES = ProcessTable()
_SYMBOLIZER = Symbolizer(_PROCESSES)


def php_names(sample) -> list[str]:
    return [f.name for f in reversed(sample.stack) if f.kind is FrameKind.PHP]


def start(seconds: str) -> subprocess.Popen:
    proc = subprocess.Popen([require_tool("php"), str(WORKLOAD), seconds], stdout=subprocess.PIPE, text=True)
    json.loads(proc.stdout.readline())
    return proc


def profile_until(pid: int, enough, max_seconds: float, **config) -> list:
    samples: list = []
    with Engine(EngineConfig(frequency=499, pids=(pid,), **config), symbolizer=_SYMBOLIZER,
                processes=_PROCESSES) as prof:
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline and not enough(samples):
            time.sleep(0.5)
            samples.extend(prof.collect()[0].samples)
    return samples


def hot_share(samples) -> tuple[float, int]:
    c = Counter()
    for s in samples:
        names = php_names(s)
        for hot in ("Workload::hot_a", "Workload::hot_b"):
            if hot in names:
                c[hot] += s.value
    total = sum(c.values())
    return (100.0 * c["Workload::hot_a"] / total if total else 0.0), total


def checked_hot_samples(samples) -> tuple[list, int]:
    """The samples in hot_a or hot_b and their count, once their split (75/25 within 5 points of
    300+) and each one's callers ({main} > run > step > hot) are checked."""
    share, total = hot_share(samples)
    assert total >= 300, f"only {total} samples in hot_a/hot_b"
    assert abs(share - 75) <= 5, f"hot_a has {share:.1f}% of {total} samples (built: 75%)"
    hot_samples = []
    for s in samples:
        names = php_names(s)
        hot = next((h for h in ("Workload::hot_a", "Workload::hot_b") if h in names), None)
        if hot is None:
            continue
        assert names[:4] == ["{main}", "Workload::run", "Workload::step", hot], names
        hot_samples.append(s)
    return hot_samples, total


@pytest.mark.shares
def test_shares_order_and_lines():
    proc = start("60")
    try:
        samples = profile_until(proc.pid, lambda got: hot_share(got)[1] >= 1200, 12)
    finally:
        proc.kill()
        proc.wait()
    hot_samples, _ = checked_hot_samples(samples)
    lines = {f"Workload::{n}": function_lines(WORKLOAD, n) for n in ("burn", "hot_a", "hot_b", "step", "run")}
    lines["cpu_seconds"] = function_lines(WORKLOAD, "cpu_seconds")
    checked = 0
    for s in hot_samples:
        for f in s.stack:
            if f.kind is FrameKind.PHP and f.name in lines:
                assert Path(f.file) == WORKLOAD, f
                assert f.line in lines[f.name], f
        checked += 1
    assert checked >= 300
    # internal functions are named (getrusage under cpu_seconds), native frames stay below them
    leaves = Counter(php_names(s)[-1] for s in samples if php_names(s))
    assert leaves["getrusage"] > 0, leaves.most_common(5)
    assert any(f.kind is FrameKind.NATIVE for s in samples for f in s.stack)


def test_each_function_read_knows_where_its_opcodes_are():
    """op_array.opcodes and .last at the offsets of the version (runtimes/php/detect.py): every
    opcode of every user function read has a line inside the function, so a frame's opline is
    checked against the right range (source.py names a line only from its own opcodes)."""
    proc = start("60")
    try:
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,)), symbolizer=_SYMBOLIZER,
                    processes=_PROCESSES) as prof:
            time.sleep(1.5)
            prof.collect()
            php = runtime_source(prof, "php")
            funcs = [f for f in php._funcs.get(proc.pid, {}).values() if f.user]
            mem = LiveProcess(proc.pid)
            lineno = detect(proc.pid).offsets.op_lineno
            for f in funcs:
                assert f.last, f
                linenos = {mem.u32(f.opcodes + ZEND_OP_SIZE * i + lineno) for i in range(f.last)}
                assert linenos <= set(f.lines), (f.name, sorted(linenos), f.lines)
    finally:
        proc.kill()
        proc.wait()
    assert {"Workload::hot_a", "Workload::step", "{main}"} <= {f.name for f in funcs}, funcs


def test_no_php_leaves_native_frames():
    proc = start("60")
    try:
        samples = profile_until(proc.pid, lambda got: sum(s.value for s in got) >= 200, 6, runtimes_off=("php",))
    finally:
        proc.kill()
        proc.wait()
    assert sum(s.value for s in samples) >= 50
    assert not any(f.kind is FrameKind.PHP for s in samples for f in s.stack)


def test_started_after_profiler_and_exited_keep_names():
    php = require_tool("php")
    with Engine(EngineConfig(frequency=499, comms=("php",)), symbolizer=_SYMBOLIZER, processes=_PROCESSES) as prof:
        proc = subprocess.Popen([php, str(WORKLOAD), "1.5"], stdout=subprocess.DEVNULL)
        proc.wait(timeout=30)
        time.sleep(0.3)
        samples = [s for s in prof.collect()[0].samples if s.pid == proc.pid]
        stats = runtime_source(prof, "php").stats()
    names = Counter(n for s in samples for n in php_names(s))
    assert names["Workload::hot_a"] > 0 and names["Workload::hot_b"] > 0, names.most_common(8)
    assert names["[unknown php]"] == 0, names.most_common(8)
    assert stats["walks"] >= sum(s.value for s in samples if php_names(s)) > 0, stats


JIT_FLAGS = ("-d", "opcache.enable_cli=1", "-d", "opcache.jit_buffer_size=32M", "-d", "opcache.jit=tracing")


@pytest.mark.shares
def test_opcache_jit_frames_named_and_placed():
    """With opcache's tracing JIT on (Debian ships it off: jit_buffer_size=0), the functions keep
    their names, order and split; native frames stop at the JIT code, which is one `[php jit]`
    frame below every PHP frame (the VM's entry frames past it are never reached by the unwinder,
    so nothing native is put between PHP frames)."""
    proc = subprocess.Popen([require_tool("php"), *JIT_FLAGS, str(WORKLOAD), "60"], stdout=subprocess.PIPE, text=True)
    json.loads(proc.stdout.readline())
    try:
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,)), symbolizer=_SYMBOLIZER, processes=_PROCESSES) as prof:
            samples: list = []
            deadline = time.monotonic() + 12
            while time.monotonic() < deadline and hot_share(samples)[1] < 1200:
                time.sleep(0.5)
                samples.extend(prof.collect()[0].samples)
            stats = runtime_source(prof, "php").stats()
    finally:
        proc.kill()
        proc.wait()
    hot_samples, total = checked_hot_samples(samples)
    marked = 0
    for s in hot_samples:
        root_first = list(reversed(s.stack))
        user = [f for f in root_first if f.kind is not FrameKind.KERNEL]
        if any(f.name == "[php jit]" for f in user):
            marked += s.value
            last_php = max(i for i, f in enumerate(user) if f.kind is FrameKind.PHP)
            assert all(f.kind is FrameKind.PHP for f in user[:last_php + 1]), [f.name for f in user]
            assert user[last_php + 1].name == "[php jit]", [f.name for f in user]
    assert marked >= total // 2, (marked, total)
    assert stats["jit_stacks"] > 0, stats
