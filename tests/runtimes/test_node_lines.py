"""Node.js (V8) frames carry the line being executed, not their function's first line: a hot loop,
profiled in each of V8's tiers, against node's own profiler (`node --cpu-prof`: its positionTicks
give the lines of the same workload)."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from .test_node import _need_node
from .test_node_versions import node_binary

pytestmark = pytest.mark.root

HERE = Path(__file__).parent
WORK = HERE / "node_lines.js"
TEXT = WORK.read_text().splitlines()
HEADER = next(i for i, t in enumerate(TEXT) if t.startswith("function hot(")) + 1
LOOP = range(next(i for i, t in enumerate(TEXT) if "loop: first" in t) + 1,
             next(i for i, t in enumerate(TEXT) if "loop: last" in t) + 2)
# optimized (TurboFan from the loop's on-stack replacement on), interpreted only, baseline (Sparkplug)
TIERS = {"optimized": [], "jitless": ["--jitless"], "ignition": ["--no-opt", "--no-sparkplug"],
         "sparkplug": ["--no-opt", "--always-sparkplug"]}


def hot_lines(samples) -> Counter:
    """Samples of `hot` by the line its frame carries."""
    lines: Counter = Counter()
    for s in samples:
        frame = next((f for f in s.stack if f.kind is FrameKind.JS and f.name.startswith("hot (")), None)
        if frame is not None:
            assert frame.file == str(WORK), frame
            lines[frame.line] += s.value
    return lines


def profile_lines(flags: list[str], seconds: int = 30, node: str = "") -> Counter:
    """hotstack's lines of `hot` in node_lines.js run with `flags` for `seconds`: until 600 samples
    of it or 12 s; then the run is ended, or where it runs shorter, waited for (its --cpu-prof is
    written as it exits)."""
    proc = subprocess.Popen([node or _need_node(), *flags, str(WORK), str(seconds)], stdout=subprocess.PIPE, text=True)
    samples: list = []
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)       # past the first tier-ups
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,), unwind="kernel")) as prof:
            deadline = time.monotonic() + 12.0
            while time.monotonic() < deadline and sum(hot_lines(samples).values()) < 600:
                time.sleep(1.0)
                samples.extend(prof.collect()[0].samples)
        if seconds < 30:
            assert proc.wait(timeout=60) == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return hot_lines(samples)


def cpu_prof_lines(path: Path) -> Counter:
    """--cpu-prof's ticks of `hot` by line (its nodes' positionTicks)."""
    lines: Counter = Counter()
    for node in json.loads(path.read_text())["nodes"]:
        if node["callFrame"]["functionName"] == "hot":
            for tick in node.get("positionTicks", ()):
                lines[tick["line"]] += tick["ticks"]
    return lines


def in_loop(lines: Counter) -> float:
    return sum(n for line, n in lines.items() if line in LOOP) / max(1, sum(lines.values()))


@pytest.mark.parametrize("tier", TIERS)
def test_node_frames_carry_the_line_being_executed(tier):
    """>= 90% of the hot function's samples carry a line of its loop, never its first line."""
    lines = profile_lines(TIERS[tier])
    print(tier, sorted(lines.items()))
    assert sum(lines.values()) >= 200, lines
    assert in_loop(lines) >= 0.9, (sorted(lines.items()), list(LOOP), HEADER)
    assert lines[HEADER] <= 0.05 * sum(lines.values()), sorted(lines.items())


@pytest.mark.parametrize("version", ["22", "24"])
@pytest.mark.parametrize("tier", ["optimized", "ignition", "sparkplug"])
def test_other_node_versions_carry_the_line_being_executed(tier, version):
    """The official builds of Node 22 (V8 12.4) and 24 (V8 13.6: no JSFunction::code, a Code is found
    from its pc alone); Maglev off in the unoptimized tiers (V8 13's Maglev code, compiled without
    a position table outside a profiler, keeps its function's line: README)."""
    flags = TIERS[tier] + (["--no-maglev"] if tier != "optimized" else [])
    lines = profile_lines(flags, node=node_binary(version))
    print(version, tier, sorted(lines.items()))
    assert sum(lines.values()) >= 200, lines
    assert in_loop(lines) >= 0.9, (sorted(lines.items()), list(LOOP), HEADER)


@pytest.mark.parametrize("tier", ["optimized", "ignition"])
def test_node_lines_match_cpu_prof(tmp_path, tier):
    """The same workload under `node --cpu-prof`: its ticks of `hot` are in the loop too, and the
    line hotstack gives most samples is one V8's profiler gives ticks to."""
    flags = [*TIERS[tier], "--cpu-prof", f"--cpu-prof-dir={tmp_path}"]
    ours = profile_lines(flags, seconds=14)
    truth = cpu_prof_lines(next(tmp_path.glob("*.cpuprofile")))
    print(tier, "hotstack", sorted(ours.items()), "cpu-prof", sorted(truth.items()))
    assert sum(ours.values()) >= 200 and sum(truth.values()) >= 200, (ours, truth)
    assert in_loop(truth) >= 0.9, truth
    assert in_loop(ours) >= 0.9, ours
    top = ours.most_common(1)[0][0]
    assert truth[top] > 0, (top, sorted(truth.items()))
