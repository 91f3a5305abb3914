"""An interpreter whose executable is renamed (a copy of python3, ruby, perl, php or node under a
name that says nothing, as an application bundling its runtime has): recognized by what its file
holds (common/files.LAUNCHER_MARKS), read through its own mapping, its frames named."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from ..peers import require_tool
from .frames_harness import SPIN, stopping

pytestmark = pytest.mark.root


CASES = {
    "python": (lambda: str(Path(sys.executable).resolve()), "-c", FrameKind.PYTHON),
    "ruby": (lambda: shutil.which("ruby3.1") or require_tool("ruby"), "-e", FrameKind.RUBY),
    "perl": (lambda: require_tool("perl"), "-e", FrameKind.PERL),
    "php": (lambda: shutil.which("php8.2") or require_tool("php"), "-r", FrameKind.PHP),
    "node": (lambda: require_tool("node"), "-e", FrameKind.JS),
}


def _spin_samples(proc: subprocess.Popen) -> list:
    """Process `proc`'s samples (every process sampled, the kernel unwinder) until 300 of them or
    20 s; it must run all along."""
    samples = []
    with Engine(EngineConfig(frequency=499, unwind="kernel")) as prof:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(s.value for s in samples) < 300:
            time.sleep(0.5)
            assert proc.poll() is None, proc.stderr.read()
            samples.extend(s for s in prof.collect()[0].samples if s.pid == proc.pid)
    return samples


@pytest.mark.parametrize("runtime", sorted(CASES))
def test_a_renamed_interpreter_is_recognized_by_its_file(runtime, tmp_path):
    find, code_flag, kind = CASES[runtime]
    real = Path(find()).resolve()
    copy = tmp_path / "appworker"            # a name that holds no runtime's word
    shutil.copy2(real, copy)
    proc = subprocess.Popen([str(copy), code_flag, SPIN[kind]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with stopping(proc):
        samples = _spin_samples(proc)
    # (the first samples may come before the interpreter is looked at: a bound, not all)
    total = sum(s.value for s in samples)
    named = sum(s.value for s in samples
                if any(f.kind is kind and "hs_spin" in f.name for f in s.stack))
    assert total >= 100, f"{total} samples of the renamed {runtime}"
    assert named >= 0.8 * total, (f"{named} of {total} samples with a {kind.value} frame hs_spin; a stack: "
                                  f"{[f.name for f in samples[-1].stack][:12]}")


def _renamed_copy(src: Path, dst: Path, old: bytes, new: bytes) -> None:
    """A copy of `src` whose dynamic strings name `new` where they named `old` (same length: the
    SONAME and DT_NEEDED strings are patched in place, as no table moves)."""
    assert len(old) == len(new)
    data = src.read_bytes()
    assert b"\0" + old + b"\0" in data, f"{src} names no {old!r}"
    dst.write_bytes(data.replace(b"\0" + old + b"\0", b"\0" + new + b"\0"))
    dst.chmod(0o755)


def test_a_renamed_runtime_library_is_found_by_what_it_holds(tmp_path):
    """A renamed launcher whose runtime lives in a renamed library (an application bundling libruby
    under its own name; without gems, whose extensions link libruby by its own name): neither file's name says ruby, and the library is found by its mark
    (RUNTIME_MARKS) among the files the process runs."""
    ruby = Path(shutil.which("ruby3.1") or require_tool("ruby")).resolve()
    needed = subprocess.run(["ldd", str(ruby)], capture_output=True, text=True, check=True).stdout
    lib = next((line.split("=>")[1].split()[0] for line in needed.splitlines() if "libruby" in line), None)
    if lib is None:
        pytest.skip(f"{ruby} does not link libruby")
    soname = Path(lib).name.encode()
    alias = (b"libappcore.so." + b"0" * (len(soname) - len(b"libappcore.so.")))
    assert b"ruby" not in alias
    _renamed_copy(Path(lib).resolve(), tmp_path / alias.decode(), soname, alias)
    _renamed_copy(ruby, tmp_path / "appworker", soname, alias)
    proc = subprocess.Popen([str(tmp_path / "appworker"), "--disable-gems", "-e", SPIN[FrameKind.RUBY]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={"LD_LIBRARY_PATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    with stopping(proc):
        samples = _spin_samples(proc)
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert alias.decode() in maps and "libruby" not in maps, "the renamed library is not what the process runs"
    total = sum(s.value for s in samples)
    named = sum(s.value for s in samples if any(f.kind is FrameKind.RUBY and "hs_spin" in f.name for f in s.stack))
    assert total >= 100, f"{total} samples of the renamed ruby"
    assert named >= 0.8 * total, f"{named} of {total} samples with a Ruby frame hs_spin"
