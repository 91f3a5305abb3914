"""Each language's hot function is named in a real profile of a real binary built here.

All workloads run at once and one `hotstack run profile_cpu` profiles them all (a run costs
seconds of BPF loading on a busy machine); each test then reads its own process's stacks,
told apart by comm (the folded output's first field).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hotstack.symbols.elf import ElfFile
from tests.conftest import Workload

from .conftest import WORKLOADS, need, profile_folded, run

pytestmark = pytest.mark.root


def _build_natives(out: Path) -> dict[str, list[str]]:
    """comm -> argv of each native workload whose compiler is here (the others are left out)."""
    argv: dict[str, list[str]] = {}
    if shutil.which("g++"):
        run("g++", "-O2", "-fno-omit-frame-pointer", WORKLOADS / "hot_cpp.cpp", "-o", out / "hot_cpp")
        argv["hot_cpp"] = [str(out / "hot_cpp")]
    if shutil.which("rustc"):
        for mangling in ("legacy", "v0"):
            # Stable rustc mangles the legacy way by default (choosing "legacy" explicitly is unstable).
            mangle = ["-C", "symbol-mangling-version=v0"] if mangling == "v0" else []
            exe = out / f"hot_rust_{mangling}"
            run("rustc", "-O", "-C", "force-frame-pointers=yes", *mangle, "--crate-name", exe.name,
                WORKLOADS / "hot_rust.rs", "-o", exe)
            argv[exe.name] = [str(exe)]
    if shutil.which("go"):
        src = out / "gosrc"
        src.mkdir()
        shutil.copy(WORKLOADS / "hot_go.go", src / "main.go")
        (src / "go.mod").write_text("module example.com/hotgo\n\ngo 1.18\n")
        env = {**os.environ, "CGO_ENABLED": "0"}
        for name, flags in (("hot_go", ""), ("hot_go_stripped", "-s -w")):
            run("go", "build", f"-ldflags={flags}", "-o", out / name, ".", cwd=src, env=env)
            argv[name] = [str(out / name)]
    if shutil.which("gcc"):
        # Three optimization levels: three build ids (one source would give one build id, and the
        # build-id debug file would then name the "bare" binary too).
        for name, opt in (("hot_c_bare", "-O2"), ("hot_c_link", "-O1"), ("hot_c_buildid", "-Os")):
            exe = out / name
            run("gcc", opt, "-g", "-fno-omit-frame-pointer", "-Wl,--build-id", WORKLOADS / "hot_c.c", "-o", exe)
            run("objcopy", "--only-keep-debug", exe, f"{exe}.debug")
            run("strip", exe, "-o", f"{exe}.s")
        # The seed's recipe: objcopy --only-keep-debug, strip, objcopy --add-gnu-debuglink.
        run("objcopy", f"--add-gnu-debuglink={out / 'hot_c_link.debug'}", out / "hot_c_link.s", out / "hot_c_link.l")
        argv["hot_c_bare.s"] = [str(out / "hot_c_bare.s")]
        argv["hot_c_link.l"] = [str(out / "hot_c_link.l")]
        argv["hot_c_buildid.s"] = [str(out / "hot_c_buildid.s")]
    return argv


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """comm -> folded lines of that comm, from one profile of every workload, per demangle mode."""
    out = tmp_path_factory.mktemp("languages")
    argv = _build_natives(out)
    started: list[Workload] = []
    cleanup: list[Path] = []
    try:
        if "hot_c_buildid.s" in argv:
            # The real GDB path, removed afterwards; the build id is this test binary's own.
            with ElfFile(str(out / "hot_c_buildid")) as elf:
                build_id = elf.build_id()
            target = Path(f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(out / "hot_c_buildid.debug", target)
            cleanup.append(target)
        for comm, cmd in argv.items():
            started.append(Workload(cmd))
        if shutil.which("node"):
            # (--perf-basic-prof also has V8 write an isolate-*-v8.log into the working directory)
            started.append(Workload(["node", "--perf-basic-prof", str(WORKLOADS / "hot_node.js")], cwd=out))
            cleanup.append(Path(f"/tmp/perf-{started[-1].pid}.map"))
        if shutil.which("javac") and shutil.which("java") and shutil.which("jcmd"):
            run("javac", "-d", out, WORKLOADS / "HotJava.java")
            started.append(Workload(["java", "-XX:+PreserveFramePointer", "-cp", str(out), "HotJava"]))
            java = started[-1]
            cleanup.append(Path(f"/tmp/perf-{java.pid}.map"))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:     # the JVM answers jcmd once it is up
                time.sleep(1)
                if subprocess.run(["jcmd", str(java.pid), "Compiler.perfmap"], capture_output=True).returncode == 0 \
                        and "crunchInJava" in Path(f"/tmp/perf-{java.pid}.map").read_text():
                    break
        time.sleep(0.5)
        pids = [w.pid for w in started]
        result = {"full": profile_folded(*pids, seconds=5)}
        picked = [w.pid for w, comm in zip(started, argv) if comm in ("hot_cpp", "hot_rust_v0")]
        if picked:
            result["simplified"] = profile_folded(*picked, seconds=3, extra=("--demangle", "simplified"))
        yield result
    finally:
        for w in started:
            w.stop()
        for path in cleanup:
            path.unlink(missing_ok=True)


def frames(folded: str, comm: str | None = None) -> list[str]:
    out = []
    for line in folded.splitlines():
        stack = line.rpartition(" ")[0].split(";")
        if comm is None or stack[0] == comm[:15]:
            out.extend(stack[1:])
    return out


def test_cpp_templates_and_namespaces_demangled(profiles):
    need("g++")
    full = frames(profiles["full"], "hot_cpp")
    # g++ clones the function (`.isra.0`): full mode drops the clone suffix as Alloy's does.
    assert "app::Worker<double>::spin(double)" in full, full[:20]
    simplified = frames(profiles["simplified"], "hot_cpp")
    assert "app::Worker::spin" in simplified, simplified[:20]


@pytest.mark.parametrize("mangling", ["legacy", "v0"])
def test_rust_legacy_and_v0_demangled(profiles, mangling):
    need("rustc")
    got = frames(profiles["full"], f"hot_rust_{mangling}")
    hits = [f for f in got if f.startswith(f"hot_rust_{mangling}::engine::crunch")]
    assert hits, got[:20]
    assert not any(f.startswith(("_ZN", "_R")) for f in got), got[:20]
    if mangling == "v0":
        assert any(f == "hot_rust_v0::engine::crunch::<f32>" for f in hits), hits
        assert "hot_rust_v0::engine::crunch" in frames(profiles["simplified"], "hot_rust_v0")
    else:
        assert "hot_rust_legacy::engine::crunch" in hits     # the ::h<hash> is gone


@pytest.mark.parametrize("comm", ["hot_go", "hot_go_stripped"])
def test_go_names_from_gopclntab(profiles, comm):
    need("go")
    got = frames(profiles["full"], comm)
    assert "main.crunchNumbers" in got, got[:20]
    assert "runtime.main" in got, got[:20]


def test_stripped_c_without_debug_file_shows_module_offset(profiles):
    need("gcc")
    got = frames(profiles["full"], "hot_c_bare.s")
    assert not any("stripped_hot_loop" in f for f in got)
    assert any(f.startswith("hot_c_bare.s+0x") for f in got), got[:20]


def test_stripped_c_with_debuglink(profiles):
    need("gcc")
    got = frames(profiles["full"], "hot_c_link.l")
    assert "stripped_hot_loop" in got, got[:20]


def test_stripped_c_with_build_id_debug_file(profiles):
    need("gcc")
    got = frames(profiles["full"], "hot_c_buildid.s")
    assert "stripped_hot_loop" in got, got[:20]


def test_node_perf_basic_prof(profiles):
    need("node")
    got = frames(profiles["full"])
    assert any("crunchInJavaScript" in f for f in got), [f for f in got if "JS" in f or "js" in f][:20]


def test_java_perf_map_from_jcmd(profiles):
    need("javac"), need("java"), need("jcmd")
    got = frames(profiles["full"])
    assert any("HotJava" in f and "crunchInJava" in f for f in got), [f for f in got if "Java" in f][:20]


def _python_312() -> str | None:
    """A Python 3.12+ to run: this one, one on PATH, or one that pyenv has installed."""
    if sys.version_info >= (3, 12):
        return sys.executable
    candidates = [os.environ.get("HOTSTACK_TEST_PYTHON", "")]
    candidates += [shutil.which(n) or "" for n in ("python3.14", "python3.13", "python3.12")]
    if shutil.which("pyenv"):
        versions = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True).stdout.split()
        recent = [v for v in versions if v.split(".")[0] == "3" and v.split(".")[1:2] and v.split(".")[1].isdigit()
                  and int(v.split(".")[1]) >= 12]
        for v in sorted(recent, reverse=True)[:2]:
            prefix = subprocess.run(["pyenv", "prefix", v], capture_output=True, text=True).stdout.strip()
            if prefix:
                candidates.append(f"{prefix}/bin/python3")
    for path in candidates:
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
        # Debian 12 has no Python 3.12 package and no registry ships an interpreter: skip, even in CI.
        pytest.skip("no Python 3.12+ here")
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
        past = 0x10                                        # mapped by nothing
        leaf, caller, nowhere = sym.user_frames(w.pid, [inside, inside + 1, past])
    finally:
        w.stop()
        perf_map.unlink(missing_ok=True)
    assert (leaf.name, leaf.kind) == (name, FrameKind.JIT)
    assert caller.name == name
    assert nowhere.name == "[unknown]"
