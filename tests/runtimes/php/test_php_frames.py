"""PHP frames through the real BPF sampler, against the distribution's php-cli (8.2 on Debian 12).

Ground truth is the split the script is built to have (75/25 of its CPU time): no independent PHP
sampling profiler installs from a package registry here."""

from __future__ import annotations

import subprocess
import time
from collections import Counter

import pytest

from hotstack.procs import LiveProcess
from hotstack.profile.model import FrameKind
from hotstack.runtimes.php.detect import detect
from hotstack.runtimes.php.source import ZEND_OP_SIZE
from tests.runtime_fixtures import runtime_source
from tests.runtimes.frames_harness import PHP, collect_until, engine, profile_until, stopping

from source_lines import function_lines

pytestmark = pytest.mark.root

WORKLOAD = PHP.workload
php_names = PHP.names


def checked_hot_samples(samples) -> tuple[list, int]:
    """The samples in hot_a or hot_b and their count, once their split (75/25 within 5 points of
    300+) and each one's callers ({main} > run > step > hot, then burn or nothing) are checked."""
    _, total = PHP.assert_split(samples)
    return PHP.hot_samples(samples), total


@pytest.mark.shares
def test_shares_order_and_lines():
    with PHP.running("60") as proc:
        samples = profile_until(proc.pid, lambda got: PHP.hot_share(got)[1] >= 1200, 12)
    hot_samples, _ = checked_hot_samples(samples)
    lines = {f"Workload::{n}": function_lines(WORKLOAD, n) for n in ("burn", "hot_a", "hot_b", "step", "run")}
    lines["cpu_seconds"] = function_lines(WORKLOAD, "cpu_seconds")
    PHP.assert_lines(hot_samples, lines)
    assert len(hot_samples) >= 300
    # internal functions are named (getrusage under cpu_seconds), native frames stay below them
    leaves = Counter(php_names(s)[-1] for s in samples if php_names(s))
    assert leaves["getrusage"] > 0, leaves.most_common(5)
    assert any(f.kind is FrameKind.NATIVE for s in samples for f in s.stack)


def test_each_function_read_knows_where_its_opcodes_are():
    """op_array.opcodes and .last at the offsets of the version (runtimes/php/detect.py): every
    opcode of every user function read has a line inside the function, so a frame's opline is
    checked against the right range (source.py names a line only from its own opcodes)."""
    with PHP.running("60") as proc, engine(pids=(proc.pid,)) as prof:
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
    assert {"Workload::hot_a", "Workload::step", "{main}"} <= {f.name for f in funcs}, funcs


def test_no_php_leaves_native_frames():
    PHP.assert_off_leaves_native_frames()


def test_started_after_profiler_and_exited_keep_names():
    names, _ = PHP.started_after_profiler()
    assert names["[unknown php]"] == 0, names.most_common(8)


JIT_FLAGS = ("-d", "opcache.enable_cli=1", "-d", "opcache.jit_buffer_size=32M", "-d", "opcache.jit=tracing")


@pytest.mark.shares
def test_opcache_jit_frames_named_and_placed():
    """With opcache's tracing JIT on (Debian ships it off: jit_buffer_size=0), the functions keep
    their names, order and split; native frames stop at the JIT code, which is one `[php jit]`
    frame below every PHP frame (the VM's entry frames past it are never reached by the unwinder,
    so nothing native is put between PHP frames)."""
    with PHP.running("60", *JIT_FLAGS) as proc, engine(pids=(proc.pid,)) as prof:
        samples = collect_until(prof, lambda got: PHP.hot_share(got)[1] >= 1200, 12)
        stats = runtime_source(prof, "php").stats()
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


def test_code_run_by_php_r_is_named():
    """`php -r CODE` (as eval()) compiles its code into an op array of type ZEND_EVAL_CODE (4, not a
    function's 2): its frame is named `{main}` with the file PHP gives it ("Command line code") and a
    line of it, under the function it calls, never `[unknown php]`."""
    code = "function hs_spin() { $x = 0; while (true) { $x++; } }\nhs_spin();\n"
    with stopping(subprocess.Popen(["php", "-r", code])) as proc:
        samples = profile_until(proc.pid, lambda got: sum(s.value for s in got if s.pid == proc.pid) >= 200, 12)
    samples = [s for s in samples if s.pid == proc.pid]
    total = sum(s.value for s in samples)
    assert total >= 100, total
    stacks = Counter(tuple((f.name, f.file, f.line) for f in reversed(s.stack) if f.kind is FrameKind.PHP)
                     for s in samples for _ in range(s.value))
    named = sum(n for stack, n in stacks.items()
                if len(stack) >= 2 and stack[0] == ("{main}", "Command line code", 2) and stack[1][0] == "hs_spin")
    assert named >= 0.9 * total, stacks.most_common(4)
