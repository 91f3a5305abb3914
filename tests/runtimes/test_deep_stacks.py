"""Runtime stacks deeper than the walker's frame limit (bpf/schema.yaml: V8_MAX_FRAMES,
HS_MAX_FRAMES): the leaf-most frames named up to the limit, then one [truncated] frame, never the
runtime's frames past the limit shown as made-up callers ([unknown] JIT frames, V8's interpreter
trampolines)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from hotstack.profile.model import TRUNCATED, UNKNOWN, FrameKind
from hotstack.sampling import Engine, EngineConfig

from .test_hotspot import _jdk
from .test_node import _need_node

pytestmark = pytest.mark.root

HERE = Path(__file__).parent / "deep"


def _deep_samples(argv: list[str], kind: FrameKind, want: int = 150, seconds: float = 15.0) -> list:
    """Samples of the workload that hold at least 60 frames of `kind` (in its deep recursion)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deep = []
    try:
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,), unwind="kernel")) as prof:
            time.sleep(1.5)          # past start-up and the first compilations
            prof.collect()
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and sum(s.value for s in deep) < want:
                time.sleep(0.5)
                assert proc.poll() is None, proc.stderr.read()
                for s in prof.collect()[0].samples:
                    if s.pid == proc.pid and sum(f.kind is kind for f in s.stack) >= 60:
                        deep.append(s)
    finally:
        proc.kill()
        proc.wait()
    assert sum(s.value for s in deep) >= 50, f"{sum(s.value for s in deep)} deep samples"
    return deep


def _check_cut(deep: list, made_up) -> None:
    total = sum(s.value for s in deep)
    cut = sum(s.value for s in deep if TRUNCATED in s.stack)
    assert cut >= 0.95 * total, f"{cut} of {total} deep samples marked [truncated]"
    for s in deep:
        if TRUNCATED not in s.stack:
            continue
        # rootward of the cut: no runtime frame, named or made up (the leaf side may hold the
        # runtime's own calls into C++, a GC through V8's CEntry builtin)
        at = s.stack.index(TRUNCATED)
        rest = s.stack[at + 1:]
        bad = [f.name for f in rest if made_up(f) or f.kind not in (FrameKind.NATIVE, FrameKind.KERNEL)]
        assert not bad, f"made-up frames {bad[:5]} past the cut in {[f.name for f in rest][:40]}"


def test_a_java_recursion_past_the_limit_is_cut_not_made_up(tmp_path):
    subprocess.run([_jdk("javac"), "-d", str(tmp_path), str(HERE / "Deep.java")], check=True, timeout=120)
    deep = _deep_samples([_jdk("java"), "-cp", str(tmp_path), "Deep", "3000"], FrameKind.JAVA)
    _check_cut(deep, lambda f: f.name == UNKNOWN)


def test_a_node_recursion_past_the_limit_is_cut_not_made_up():
    deep = _deep_samples([_need_node(), str(HERE / "deep.js"), "100"], FrameKind.JS)
    _check_cut(deep, lambda f: f.name == UNKNOWN or f.name.startswith("Builtins_"))
