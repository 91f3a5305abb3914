"""Node.js (V8) frames through the real BPF sampler and kernel unwinder, against node's own
profiler (`node --cpu-prof`) in the same run."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from . import lifecycle
from .frames_harness import (assert_counted_in_agent_metrics, assert_no_flag_leaves_native_frames,
                             gadget_engine_config, stopping)

pytestmark = pytest.mark.root

HERE = Path(__file__).parent
WORK = HERE / "node_work.js"
NODE = shutil.which("node")


def _need_node() -> str:
    if NODE is None:
        pytest.skip("no node on this machine (.ci/install.d/runtimes.sh installs it)")
    return NODE


def js_names(sample) -> list[str]:
    """Function names of the JavaScript frames, root first."""
    return [f.name.split(" (")[0] for f in reversed(sample.stack) if f.kind is FrameKind.JS]


def shares(counts: dict[str, float]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: 100.0 * v / total for k, v in counts.items()}


def hotstack_split(samples) -> dict[str, float]:
    counts = {"optimized": 0, "parsing": 0}
    for s in samples:
        names = js_names(s)
        for hot in counts:
            if hot in names:
                counts[hot] += s.value
    return counts


def cpuprofile_split(path: Path) -> dict[str, float]:
    """Time per hot function (self and below) from a .cpuprofile: each sample's node and its parents."""
    prof = json.loads(path.read_text())
    nodes = {n["id"]: n for n in prof["nodes"]}
    parent = {c: n["id"] for n in prof["nodes"] for c in n.get("children", ())}
    counts = {"optimized": 0.0, "parsing": 0.0}
    for node_id, delta in zip(prof["samples"], prof["timeDeltas"][1:] + [0]):
        seen = set()
        while node_id is not None:
            seen.add(nodes[node_id]["callFrame"]["functionName"])
            node_id = parent.get(node_id)
        for hot in counts:
            if hot in seen:
                counts[hot] += max(delta, 0)
    return counts


# V8's tiers: TurboFan (the default for hot code), Ignition only, Sparkplug, Maglev (off by default in
# Node 20), and no JIT at all (interpreter and builtins only).
TIERS = {"turbofan": [], "ignition": ["--no-opt", "--no-sparkplug"], "sparkplug": ["--no-opt", "--always-sparkplug"],
         "maglev": ["--maglev", "--no-turbofan"], "jitless": ["--jitless"]}


@pytest.mark.shares
@pytest.mark.parametrize("tier", TIERS)
def test_node_shares_match_cpu_prof(tmp_path, tier):
    check_shares_against_cpu_prof(_need_node(), tier, tmp_path)


def check_shares_against_cpu_prof(node: str, tier: str, tmp_path: Path) -> None:
    """node_work.js in one of V8's tiers: hotstack's split of the two hot functions against
    --cpu-prof's and the script's own CPU accounting, caller order, names with script and line."""
    proc = subprocess.Popen([node, *TIERS[tier], "--cpu-prof", f"--cpu-prof-dir={tmp_path}", str(WORK), "12"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)       # past the first tier-ups
        samples = []
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,), unwind="kernel")) as prof:
            # until 400 samples of the two functions or 9 s: a busy machine gives the workload little CPU
            deadline = time.monotonic() + 9.0
            while time.monotonic() < deadline and sum(hotstack_split(samples).values()) < 400:
                time.sleep(1.0)
                samples.extend(prof.collect()[0].samples)
        out = proc.stdout.read().split()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    ours = hotstack_split(samples)
    assert sum(ours.values()) >= 200, ours
    truth = cpuprofile_split(next(tmp_path.glob("*.cpuprofile")))
    ours_pct, truth_pct = shares(ours), shares(truth)
    at = out.index("user_cpu_us")
    script_pct = shares({"optimized": int(out[at + 2]), "parsing": int(out[at + 4])})
    print(tier, "hotstack", ours_pct, "cpu-prof", truth_pct, "script", script_pct)
    if tier in ("turbofan", "jitless"):
        assert abs(ours_pct["optimized"] - truth_pct["optimized"]) <= 5, (ours_pct, truth_pct)
    # V8's profiler loses the leaf of interpreted and baseline frames of JIT-enabled runs (in Ignition it
    # gives ~43% of the time to `main` itself): the script's own user-CPU accounting is checked in every tier
    assert abs(ours_pct["optimized"] - script_pct["optimized"]) <= 5, (ours_pct, script_pct, truth_pct)
    # caller order: main calls both; names carry the script and line
    sample = max((s for s in samples if "optimized" in js_names(s)), key=lambda s: s.value)
    names = js_names(sample)
    assert names.index("main") < names.index("optimized"), names
    frame = next(f for f in sample.stack if f.name.startswith("optimized ("))
    text = WORK.read_text().splitlines()
    header = text.index("function optimized(ms) {")
    loop = range(header + 4, text.index("  return x;", header) + 1)     # `while ...` to `work++;`, 1-based
    assert frame.file == str(WORK) and frame.line in loop, (frame, loop)
    assert frame.name == f"optimized ({WORK}:{frame.line})"
    # native frames of node stay below the JavaScript ones
    assert any(f.name == "node::Start(int, char**)" or f.name.startswith("node::") for f in sample.stack)


def test_node_started_later_and_exited_keeps_names():
    node = _need_node()
    with Engine(EngineConfig(frequency=499, unwind="kernel")) as prof:
        time.sleep(0.3)
        proc = subprocess.run([node, str(WORK), "3"], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0
        time.sleep(0.3)
        samples = prof.collect()[0].samples
    mine = [s for s in samples if s.comm == "node" and js_names(s)]
    hot = sum(s.value for s in mine if {"optimized", "parsing"} & set(js_names(s)))
    assert hot >= 50, (hot, sum(s.value for s in samples if s.comm == "node"), [js_names(s) for s in mine][:5])


def _start_node(seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([_need_node(), str(WORK), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_node_started_later_keeps_names():
    """A Node process that starts after the profiler and still runs: its functions named, 75/25."""
    samples = lifecycle.started_later(_start_node)
    split = hotstack_split(samples)
    assert sum(split.values()) >= 100, (split, sum(s.value for s in samples if s.comm == "node"))
    assert abs(shares(split)["optimized"] - 75) <= 10, split


def test_node_exiting_mid_interval_keeps_names():
    """A Node process running before the profiler, followed from the interval's start, that exits
    (SIGTERM) in its middle: the interval's profile, taken after the exit, still names its functions."""
    samples = lifecycle.exiting_mid_interval(_start_node)
    split = hotstack_split(samples)
    assert sum(split.values()) >= 100, (split, sum(s.value for s in samples if s.comm == "node"))
    assert abs(shares(split)["optimized"] - 75) <= 10, split


def test_node_flags():
    assert gadget_engine_config().runtimes_off == ()
    assert gadget_engine_config("--no-node").runtimes_off == ("v8",)
    assert gadget_engine_config("--no-python").runtimes_off == ("python",)
    both = gadget_engine_config("--no-python", "--no-node")
    assert set(both.runtimes_off) >= {"python", "v8"}


def test_no_node_flag_leaves_native_frames():
    with stopping(_start_node(20)) as proc:
        assert_no_flag_leaves_native_frames(proc.pid, "--no-node", FrameKind.JS)


def test_node_counters_in_agent_metrics():
    """The agent's /metrics show the V8 source: processes attached, frames, names."""
    with stopping(_start_node(20)) as proc:
        assert_counted_in_agent_metrics(proc.pid, "v8")
