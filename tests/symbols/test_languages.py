"""Each language's hot function is named in a real profile of a real binary built here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import WORKLOADS, frames_of, need, profile_folded, run

pytestmark = pytest.mark.root


def test_cpp_templates_and_namespaces_demangled(symbols_build: Path, workloads):
    gxx = need("g++")
    exe = symbols_build / "hot_cpp"
    run(gxx, "-O2", "-fno-omit-frame-pointer", WORKLOADS / "hot_cpp.cpp", "-o", exe)
    w = workloads([exe])
    full = frames_of(profile_folded(w.pid))
    assert "app::Worker<double>::spin(double)" in full, full[:20]
    simplified = frames_of(profile_folded(w.pid, seconds=2, extra=("--demangle", "simplified")))
    assert "app::Worker::spin" in simplified, simplified[:20]
    none = frames_of(profile_folded(w.pid, seconds=2, extra=("--demangle", "none")))
    assert "_ZN3app6WorkerIdE4spinEd" in none, none[:20]


@pytest.mark.parametrize("mangling", ["legacy", "v0"])
def test_rust_legacy_and_v0_demangled(symbols_build: Path, workloads, mangling):
    rustc = need("rustc")
    exe = symbols_build / f"hot_rust_{mangling}"
    run(rustc, "-O", "-C", "force-frame-pointers=yes", "-C", f"symbol-mangling-version={mangling}",
        WORKLOADS / "hot_rust.rs", "-o", exe)
    w = workloads([exe])
    frames = frames_of(profile_folded(w.pid))
    # legacy: hot_rust_legacy::engine::crunch (hash stripped); v0 adds the generic argument.
    hits = [f for f in frames if f.startswith(f"hot_rust_{mangling}::engine::crunch")]
    assert hits, frames[:20]
    assert not any(f.startswith(("_ZN", "_R")) for f in frames), frames[:20]
    if mangling == "v0":
        assert any("crunch::<f32>" in f for f in hits), hits


@pytest.mark.parametrize("ldflags", ["", "-s -w"])
def test_go_names_from_gopclntab(symbols_build: Path, workloads, ldflags):
    go = need("go")
    src = symbols_build / "gosrc"
    src.mkdir(exist_ok=True)
    shutil.copy(WORKLOADS / "hot_go.go", src / "main.go")
    (src / "go.mod").write_text("module example.com/hotgo\n\ngo 1.20\n")
    exe = symbols_build / ("hot_go_stripped" if ldflags else "hot_go")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    run(go, "build", f"-ldflags={ldflags}", "-o", exe, ".", cwd=src, env=env)
    if ldflags:
        assert b".symtab" not in run("readelf", "-S", exe).stdout.encode()
    w = workloads([exe])
    frames = frames_of(profile_folded(w.pid))
    assert "main.crunchNumbers" in frames, frames[:20]
    assert "runtime.main" in frames, frames[:20]


def _stripped_c(symbols_build: Path, name: str) -> tuple[Path, Path]:
    exe = symbols_build / name
    run(need("gcc"), "-O1", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id", WORKLOADS / "hot_c.c", "-o", exe)
    debug = symbols_build / f"{name}.debug"
    run("objcopy", "--only-keep-debug", exe, debug)
    run("strip", exe, "-o", f"{exe}.stripped")
    return exe, debug


def test_stripped_c_without_debug_file_shows_module_offset(symbols_build: Path, workloads):
    exe, _ = _stripped_c(symbols_build, "hot_c_bare")
    w = workloads([f"{exe}.stripped"])
    frames = frames_of(profile_folded(w.pid, seconds=2))
    assert not any("stripped_hot_loop" in f for f in frames)
    assert any(f.startswith("hot_c_bare.stripped+0x") for f in frames), frames[:20]


def test_stripped_c_with_debuglink(symbols_build: Path, workloads):
    # The seed's recipe: objcopy --only-keep-debug, strip, objcopy --add-gnu-debuglink.
    exe, debug = _stripped_c(symbols_build, "hot_c_link")
    linked = symbols_build / "hot_c_link.debuglink"
    run("objcopy", f"--add-gnu-debuglink={debug}", f"{exe}.stripped", linked)
    w = workloads([linked])
    frames = frames_of(profile_folded(w.pid))
    assert "stripped_hot_loop" in frames, frames[:20]


def test_stripped_c_with_build_id_debug_file(symbols_build: Path, workloads):
    exe, debug = _stripped_c(symbols_build, "hot_c_buildid")
    from hotstack.symbols.elf import ElfFile

    with ElfFile(str(exe)) as elf:
        build_id = elf.build_id()
    assert len(build_id) == 40
    # The real GDB path, removed afterwards; the build id is this test binary's own.
    target = Path(f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(debug, target)
    try:
        w = workloads([f"{exe}.stripped"])
        frames = frames_of(profile_folded(w.pid))
    finally:
        target.unlink()
    assert "stripped_hot_loop" in frames, frames[:20]


def test_node_perf_basic_prof(workloads, tmp_path):
    node = need("node")
    w = workloads([node, "--perf-basic-prof", WORKLOADS / "hot_node.js"], settle=1.0)
    try:
        frames = frames_of(profile_folded(w.pid))
    finally:
        w.stop()
        Path(f"/tmp/perf-{w.pid}.map").unlink(missing_ok=True)
    assert any("crunchInJavaScript" in f for f in frames), frames[:30]


def test_java_perf_map_from_jcmd(symbols_build: Path, workloads):
    javac, java, jcmd = need("javac"), need("java"), need("jcmd")
    run(javac, "-d", symbols_build, WORKLOADS / "HotJava.java")
    w = workloads([java, "-XX:+PreserveFramePointer", "-cp", symbols_build, "HotJava"], settle=1.5)
    perf_map = Path(f"/tmp/perf-{w.pid}.map")
    try:
        run(jcmd, w.pid, "Compiler.perfmap")
        assert perf_map.exists()
        frames = frames_of(profile_folded(w.pid))
    finally:
        w.stop()
        perf_map.unlink(missing_ok=True)
    assert any("HotJava" in f and "crunchInJava" in f for f in frames), frames[:30]


def _python_312() -> str | None:
    if sys.version_info >= (3, 12):
        return sys.executable
    for name in ("python3.13", "python3.12", "python3.14"):
        path = shutil.which(name)
        if path and subprocess.run([path, "-c", "import sys; assert sys.version_info >= (3, 12)"],
                                   capture_output=True).returncode == 0:
            return path
    return None


def test_python_perf_trampolines_resolve_through_the_perf_map(workloads):
    """`python -X perf` writes a perf map; its trampoline addresses must name the Python function.

    (A sampled stack reaches the trampolines only through frame pointers in libpython: distro
    builds without them give no `py::` frames in a real profile, so the addresses here are the
    perf map's own, resolved by the Symbolizer of a live process.)"""
    python = _python_312()
    if python is None:
        need("python3.12")
    w = workloads([python, "-X", "perf", WORKLOADS / "hot_python.py"], settle=1.0)
    perf_map = Path(f"/tmp/perf-{w.pid}.map")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "crunch_in_python" not in (
                perf_map.read_text() if perf_map.exists() else ""):
            time.sleep(0.1)
        entries = [line.split(None, 2) for line in perf_map.read_text().splitlines()]
        start, size, name = next(e for e in entries if "crunch_in_python" in e[2])
        from hotstack.procs import ProcessTable
        from hotstack.profile.model import FrameKind
        from hotstack.symbols.symbolizer import Symbolizer

        sym = Symbolizer(ProcessTable())
        inside = int(start, 16) + int(size, 16) // 2
        past = int(start, 16) + int(size, 16) + 1 << 40   # far past every map entry
        leaf, caller, nowhere = sym.user_frames(w.pid, [inside, inside + 1, past])
    finally:
        w.stop()
        perf_map.unlink(missing_ok=True)
    assert (leaf.name, leaf.kind) == (name, FrameKind.JIT)
    assert caller.name == name
    assert nowhere.name == "[unknown]"
