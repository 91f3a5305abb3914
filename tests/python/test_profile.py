"""Python frames through the real BPF sampler, for every CPython on the machine."""

from __future__ import annotations

import ctypes
import struct
import subprocess
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from hotstack.ebpf import syscalls as sc
from hotstack.ebpf.features import helper_available
from hotstack.procs import ProcessTable
from hotstack.profile.model import FrameKind
from hotstack.symbols.symbolizer import Symbolizer
from hotstack.sampling import Engine, EngineConfig
from hotstack.sampling.cpu import CpuSampler

from pyframes_helpers import HERE, INTERPRETERS, Target

pytestmark = pytest.mark.root

RATE = 499


# One process table and symbolizer for the whole module: kallsyms and the interpreters' symbol
# tables are read once, not once per test.
_PROCESSES = ProcessTable()
_SYMBOLIZER = Symbolizer(_PROCESSES)


def profile(pid: int, seconds: float, python_enabled: bool = True, started=None):
    config = EngineConfig(frequency=RATE, pids=(pid,), runtime_frames=python_enabled)
    with Engine(config, symbolizer=_SYMBOLIZER, processes=_PROCESSES) as prof:
        if started is not None:
            started()
        return prof.run(seconds)


def profile_until(pid: int, enough, max_seconds: float) -> list:
    """Samples collected every 0.5 s until `enough(samples)` or `max_seconds` (the CI machine may
    give the workload a fraction of a CPU)."""
    samples: list = []
    config = EngineConfig(frequency=997, pids=(pid,))
    with Engine(config, symbolizer=_SYMBOLIZER, processes=_PROCESSES) as prof:
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline and not enough(samples):
            time.sleep(0.5)
            samples.extend(prof.collect()[0].samples)
    return samples


def newest() -> str:
    if not INTERPRETERS:
        pytest.skip("no CPython 3.8+ interpreter on this machine")
    return max(INTERPRETERS, key=lambda i: tuple(int(x) for x in i[0].split("-")[1].split(".")))[1]


def root_first(sample) -> list[str]:
    return [f.name for f in reversed(sample.stack)]


def python_names(sample) -> list[str]:
    return [f.name for f in reversed(sample.stack) if f.kind is FrameKind.PYTHON]


@pytest.mark.shares
def test_shares_and_order(python, target):
    t = target(python, "import runpy, json, sys; print(json.dumps({}), flush=True); "
                       "sys.argv = ['w', '30']; runpy.run_path(%r, run_name='__main__')" % str(HERE / "workload_abc.py"))
    samples = profile_until(t.pid, lambda got: sum(s.value for s in got if "caller" in python_names(s)) >= 1000, 8)
    counts = Counter()
    total = 0
    for s in samples:
        names = python_names(s)
        if "caller" not in names:
            continue
        total += s.value
        i = names.index("caller")
        assert names[:names.index("main")] and "main" in names[:i], names       # parents before children
        child = names[i + 1] if i + 1 < len(names) else ""
        if child in ("a", "b", "c"):
            counts[child] += s.value
            assert names.index(child) > i
            leaf = next(f for f in s.stack if f.kind is FrameKind.PYTHON)
            assert leaf.file.endswith("workload_abc.py") and leaf.line > 0
    everything = sum(s.value for s in samples)
    python_total = sum(s.value for s in samples if python_names(s))
    assert total >= 600, f"only {total} samples under caller() of {everything}"
    assert python_total >= 0.95 * everything, f"{python_total} of {everything} samples have Python frames"
    shares = {k: 100 * counts[k] / total for k in "abc"}
    for name, expected in (("a", 60), ("b", 30), ("c", 10)):
        assert abs(shares[name] - expected) <= 5, shares


@pytest.mark.shares
@pytest.mark.debian_unstable
def test_without_python_frames(python, target):
    t = target(python, "import json, time; print(json.dumps({}), flush=True)\n"
                       "def spin():\n    while True: sum(range(1000))\nspin()")
    prof = profile(t.pid, 0.7, python_enabled=False)
    assert prof.total > 50
    assert not any(f.kind is FrameKind.PYTHON for s in prof.samples for f in s.stack)


@pytest.fixture(scope="session")
def extensions(tmp_path_factory):
    """Build hsext for an interpreter (once per interpreter)."""
    built: dict[str, Path] = {}

    def build(python: str) -> Path:
        if python not in built:
            out = tmp_path_factory.mktemp("ext")
            paths = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include']); "
                                    "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                                   capture_output=True, text=True, check=True).stdout.split()
            include, suffix = paths[0], paths[1]
            if not Path(include, "Python.h").exists():
                pytest.fail(f"{python}: no Python.h in {include} (install the -dev package)")
            subprocess.run(["cc", "-O1", "-fno-omit-frame-pointer", "-shared", "-fPIC", f"-I{include}",
                            str(HERE / "hsext.c"), "-o", str(out / f"hsext{suffix}")], check=True)
            built[python] = out
        return built[python]
    return build


MIXED = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import hsext
    def inner():
        total = 0
        for i in range(20000):
            total += i
        return total
    def outer():
        while True:
            hsext.call_back(inner)
    print(json.dumps({}), flush=True)
    outer()
''')


@pytest.mark.shares
def test_mixed_python_c_python(python, target, extensions):
    t = target(python, MIXED, str(extensions(python)))
    prof = profile(t.pid, 1.5)
    inner = [s for s in prof.samples if "inner" in python_names(s)]
    assert sum(s.value for s in inner) > 0.3 * prof.total
    assert sum(s.value for s in prof.samples if python_names(s)) >= 0.95 * prof.total
    with_c = 0
    for s in inner:
        names = root_first(s)
        assert names.index("outer") < names.index("inner"), names
        if "call_back" in names:
            # The C frame sits between the Python frames it joins.
            assert names.index("outer") < names.index("call_back") < names.index("inner"), names
            with_c += s.value
    # Native frames in between need the native unwinder to get through libpython; where it
    # does, the C frame must be in its place. At least the C-only samples show it under outer.
    c_only = [s for s in prof.samples if "call_back" in root_first(s) and "inner" not in root_first(s)
              and python_names(s)]
    assert c_only, "no sample in the C extension"
    for s in c_only:
        names = root_first(s)
        assert "outer" in names and names.index("outer") < names.index("call_back"), names


THREADS = textwrap.dedent('''
    import json, threading
    def alpha():
        while True:
            sum(range(2000))
    def beta():
        while True:
            sum(range(2000))
    ids = {}
    def run(fn):
        ids[fn.__name__] = threading.get_native_id()
        fn()
    for fn in (alpha, beta):
        threading.Thread(target=run, args=(fn,), daemon=True).start()
    while len(ids) < 2:
        pass
    # New thread states go first in the interpreter's list: 150 idle threads started after the
    # busy ones put those far down the list that the walker searches.
    for _ in range(150):
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    print(json.dumps(ids), flush=True)
    threading.Event().wait()
''')


@pytest.mark.debian_unstable
def test_threads(python, target):
    t = target(python, THREADS)
    prof = profile(t.pid, 1.2)
    seen = Counter()
    for s in prof.samples:
        names = python_names(s)
        for fn, other in (("alpha", "beta"), ("beta", "alpha")):
            if s.tid == t.info[fn]:
                assert other not in names, (fn, names)
                if fn in names:
                    seen[fn] += s.value
                    assert names.index("run") < names.index(fn)
    assert seen["alpha"] > 20 and seen["beta"] > 20, seen


ASYNC = textwrap.dedent('''
    import asyncio, json
    def work():
        return sum(range(3000))
    def numbers():
        while True:
            work()
            yield 1
    async def crunch():
        gen = numbers()
        while True:
            next(gen)
            await asyncio.sleep(0)
    print(json.dumps({}), flush=True)
    asyncio.run(crunch())
''')


@pytest.mark.debian_unstable
def test_asyncio_and_generators(python, target):
    t = target(python, ASYNC)
    prof = profile(t.pid, 1.2)
    hits = 0
    for s in prof.samples:
        names = python_names(s)
        if "work" in names:
            assert names.index("crunch") < names.index("numbers") < names.index("work"), names
            assert names[0] == "<module>" and "run" in names[:names.index("crunch")], names
            hits += s.value
    assert hits > 0.3 * prof.total, (hits, prof.total)


def test_target_exiting_mid_profile():
    """The target exits while being profiled: its samples keep their frames, nothing fails.
    (Process lifecycle, not version-specific: one interpreter.)"""
    python = newest()
    short = Target(python, "import json, sys, time; print(json.dumps({}), flush=True); sys.stdin.readline()\n"
                           "end = time.time() + 0.3\nwhile time.time() < end: sum(range(1000))", stdin=True)
    try:
        prof = profile(short.pid, 1.0, started=short.go)
        assert short.proc.wait(timeout=5) == 0
        assert prof is not None
        assert any("<module>" in python_names(s) for s in prof.samples)
    finally:
        short.stop()


def test_process_that_becomes_python_while_profiled():
    """First sampled as a shell, then exec'ed into CPython: it is looked at again and gets its frames.
    (Process lifecycle, not version-specific: one interpreter.)"""
    python = newest()
    script = ("read go; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; "
              f"exec {python} {HERE / 'workload_abc.py'} 30")
    sh = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)

    def go():
        sh.stdin.write("go\n")
        sh.stdin.flush()
    try:
        prof = profile(sh.pid, 4, started=go)
    finally:
        sh.kill()
        sh.wait()
    comms = {s.comm for s in prof.samples}
    assert "sh" in comms, comms          # it was sampled before it ran Python
    assert any("caller" in python_names(s) for s in prof.samples), comms


def test_interpreter_walker_is_loaded_with_the_first_process_of_its_interpreter():
    """Walker programs are verified (0.1-0.7 s of CPU each) only once a process runs their
    interpreter: not for a shell, then at once when it exec's CPython, whose frames follow."""
    python = newest()
    script = f"read go; exec {python} {HERE / 'workload_abc.py'} 30"
    sh = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    samples: list = []
    try:
        with Engine(EngineConfig(frequency=RATE, pids=(sh.pid,)), symbolizer=_SYMBOLIZER,
                    processes=_PROCESSES) as prof:
            programs = prof.cpu.collection.programs
            at_start = {name for name in programs if name.startswith("profile_walk_")}
            sh.stdin.write("go\n")
            sh.stdin.flush()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any("caller" in python_names(s) for s in samples):
                time.sleep(0.5)
                samples.extend(prof.collect()[0].samples)
            after = {name for name in programs if name.startswith("profile_walk_")}
    finally:
        sh.kill()
        sh.wait()
    assert at_start == set(), at_start
    # its bpf_loop variant where the kernel has bpf_loop (5.17+), the unrolled walker elsewhere
    assert after == {"profile_walk_python_loop" if helper_available("bpf_loop") else "profile_walk_python"}, after
    assert any("caller" in python_names(s) for s in samples), Counter(s.comm for s in samples)


DEEP = 20_000


def test_deep_recursion_is_marked_truncated():
    """A 20,000-deep Python recursion: the walker keeps the leaf-most frames, and the cut is said
    by a [truncated] frame root-ward of them (not joined silently to the native root), counted in
    the profile's stats (the footer, /metrics). (Walker limit, not version-specific: one interpreter.)"""
    python = newest()
    t = Target(python, "import json, sys\nsys.setrecursionlimit(%d)\n"
                       "def rec(n):\n    if n == 0:\n        print(json.dumps({}), flush=True)\n"
                       "        while True: pass\n    return rec(n - 1)\nrec(%d)" % (DEEP + 1000, DEEP))
    try:
        prof = profile(t.pid, 1.5)
    finally:
        t.stop()
    deep = [s for s in prof.samples if "rec" in python_names(s)]
    assert sum(s.value for s in deep) > 50, prof.samples[:3]
    for s in deep:
        names = [f.name for f in reversed(s.stack)]          # root first
        cut = names.index("[truncated]")
        assert set(names[cut + 1:cut + 1 + 90]) == {"rec"}, names   # then only the leaf-most rec frames
        assert "<module>" not in names[cut:], names
    assert prof.stats.truncated == sum(s.value for s in deep), (prof.stats.truncated, len(deep))


def test_truncated_stacks_in_the_footer_and_metrics():
    from hotstack.alloy.components.ebpf_metrics import EbpfMetrics
    from hotstack.gadget.output import footer
    from hotstack.profile.model import TRUNCATED, Frame, Profile, ProfileStats, Sample
    from prometheus_client import CollectorRegistry, generate_latest

    p = Profile([Sample((Frame("rec"), TRUNCATED, Frame("main")), 7, 1, 1, "py")], 0, 10**9, 49,
                stats=ProfileStats(samples=7, truncated=7))
    assert "7 samples with a stack cut short ([truncated])" in footer(p, shown=1, distinct=1)
    registry = CollectorRegistry()
    metrics = EbpfMetrics.of(registry)

    class Engine:   # what the metrics read of a live engine
        symbolizer = type("S", (), {"stats": type("St", (), {"hits": 0, "misses": 0})(), "metrics": lambda self: {}})()

        def bpf_run_time_ns(self):
            return 0
    engine = Engine()
    metrics.observe_profile(p, engine)
    text = generate_latest(registry).decode()
    assert "hotstack_truncated_stacks_total 7.0" in text, text


REEXEC = """\
import json, os, sys
def first_image():
    sys.stdin.readline()
def second_image():
    while True:
        pass
if sys.argv[1:] == ["again"]:
    second_image()
print(json.dumps({}), flush=True)
first_image()
os.execv(sys.executable, [sys.executable, __file__, "again"])
"""


def test_python_that_reexecs_itself_keeps_its_python_frames(tmp_path):
    """CPython exec'ing itself (same executable, same comm, same start time, a new interpreter at
    new addresses): its Python frames come from the new interpreter, found again after the exec
    (issue 18, item 2). (Process lifecycle, not version-specific: one interpreter.)"""
    python = newest()
    path = tmp_path / "reexec.py"
    path.write_text(REEXEC)
    t = Target(python, f"import runpy; runpy.run_path({str(path)!r}, run_name='__main__')", stdin=True)
    samples: list = []
    try:
        config = EngineConfig(frequency=499, pids=(t.pid,))
        with Engine(config, symbolizer=_SYMBOLIZER, processes=_PROCESSES) as prof:
            time.sleep(0.5)
            samples.extend(prof.collect()[0].samples)
            t.go()
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and \
                    sum(s.value for s in samples if "second_image" in python_names(s)) < 100:
                time.sleep(0.5)
                samples.extend(prof.collect()[0].samples)
    finally:
        t.stop()
    second = sum(s.value for s in samples if "second_image" in python_names(s))
    assert second >= 100, [python_names(s) for s in samples[-5:]]


def _verified_instructions(program) -> int:
    info = ctypes.create_string_buffer(256)
    attr = sc.new_attr()
    struct.pack_into("<IIQ", attr, 0, program.fd, len(info), sc.address(info))
    sc.bpf(sc.BPF_OBJ_GET_INFO_BY_FD, attr, "info")
    return struct.unpack_from("<I", info, 216)[0]      # bpf_prog_info.verified_insns (5.16+)


@pytest.mark.skipif(not helper_available("bpf_loop"), reason="this kernel has no bpf_loop (5.17+)")
def test_the_bpf_loop_walker_is_verified_once_not_frame_by_frame():
    """The CPython walker's bpf_loop variant (its frame step a callback, loaded with the BTF function
    records the kernel asks of a program with callbacks) costs the verifier a fraction of the
    unrolled walker's work: it is paid when a host's first Python process is found."""
    sampler = CpuSampler(EngineConfig(frequency=19, unwind="kernel"))
    collection = sampler.start()
    try:
        looped = _verified_instructions(collection.load_deferred("profile_walk_python_loop"))
        unrolled = _verified_instructions(collection.load_deferred("profile_walk_python"))
    finally:
        sampler.close()
    assert 0 < looped < unrolled / 2, (looped, unrolled)


def _leaf_in(raws, start, end):
    return [r for r in raws if r.user_stack and start <= r.user_stack[0] < end]


def test_stacks_whose_leaf_is_the_evaluation_loop_are_one_stack_per_python_stack(python, target):
    """A sample whose leaf is in _PyEval_EvalFrameDefault is recorded with the loop's first address
    (bpf/native_unwind.h, leaf_start): its frame is replaced by the call's Python frames, and each
    instruction of the loop had made a stack of its own (two thirds of a Python recursion's user
    stacks). The unwinding below it is unchanged: the Python frames and their order still hold."""
    from hotstack.runtimes.python.detect import detect

    t = target(python, "import json, sys\n"
                       "def spin(n):\n"
                       "    total = 0\n"
                       "    for i in range(n):\n"
                       "        total += i * i % 7\n"
                       "    return total\n"
                       "def outer():\n"
                       "    return spin(50000)\n"
                       "print(json.dumps({}), flush=True)\n"
                       "while True:\n"
                       "    outer()\n")
    found = detect(t.pid)
    assert found is not None
    start, end = found.eval_loop
    if not start:
        pytest.skip(f"{python} names no _PyEval_EvalFrameDefault in its symbol tables")
    raws = []
    with Engine(EngineConfig(frequency=RATE, pids=(t.pid,)), symbolizer=_SYMBOLIZER, processes=_PROCESSES) as prof:
        to_profile = prof.to_profile

        def keep(sampler, batch):
            raws.extend(batch.stacks)
            return to_profile(sampler, batch)

        prof.to_profile = keep
        samples = []
        # until 80 samples have their leaf in the loop: their share of a sample varies by version and
        # machine (~13% with 3.12 on a loaded 2-CPU host), so a fixed sample count left it at 79
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(r.value for r in _leaf_in(raws, start, end)) < 80:
            time.sleep(0.5)
            samples.extend(prof.collect()[0].samples)
    in_loop = _leaf_in(raws, start, end)
    assert sum(r.value for r in in_loop) >= 80, f"{len(raws)} stacks, {len(in_loop)} with the loop as leaf"
    assert {r.user_stack[0] for r in in_loop} == {start}, sorted({hex(r.user_stack[0]) for r in in_loop})[:5]
    # few stacks: one per Python stack (a line of spin) and kernel stack, not one per instruction
    assert len({r.user_stack for r in in_loop}) <= 4, len({r.user_stack for r in in_loop})
    chains = Counter(tuple(python_names(s)[-2:]) for s in samples if python_names(s))
    assert chains and chains.most_common(1)[0][0] == ("outer", "spin"), chains
