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

pytestmark = pytest.mark.root

PY = "def hs_spin():\n    while True:\n        pass\nhs_spin()\n"
JS = "function hs_spin() { let x = 0; for (;;) { x = (x + 1) | 0; } } hs_spin();"
PHP = "function hs_spin() { $x = 0; while (true) { $x++; } } hs_spin();"
PERL = "sub hs_spin { my $x = 0; while (1) { $x++ } } hs_spin();"
RUBY = "def hs_spin; x = 0; loop { x += 1 }; end; hs_spin"

CASES = {
    "python": (lambda: str(Path(sys.executable).resolve()), ["-c", PY], FrameKind.PYTHON),
    "ruby": (lambda: shutil.which("ruby3.1") or require_tool("ruby"), ["-e", RUBY], FrameKind.RUBY),
    "perl": (lambda: require_tool("perl"), ["-e", PERL], FrameKind.PERL),
    "php": (lambda: shutil.which("php8.2") or require_tool("php"), ["-r", PHP], FrameKind.PHP),
    "node": (lambda: require_tool("node"), ["-e", JS], FrameKind.JS),
}


@pytest.mark.parametrize("runtime", sorted(CASES))
def test_a_renamed_interpreter_is_recognized_by_its_file(runtime, tmp_path):
    find, args, kind = CASES[runtime]
    real = Path(find()).resolve()
    copy = tmp_path / "appworker"            # a name that holds no runtime's word
    shutil.copy2(real, copy)
    proc = subprocess.Popen([str(copy), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples = []
    try:
        with Engine(EngineConfig(frequency=499, unwind="kernel")) as prof:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and sum(s.value for s in samples) < 300:
                time.sleep(0.5)
                assert proc.poll() is None, proc.stderr.read()
                samples.extend(s for s in prof.collect()[0].samples if s.pid == proc.pid)
    finally:
        proc.kill()
        proc.wait()
    # (the first samples may come before the interpreter is looked at: a bound, not all)
    total = sum(s.value for s in samples)
    named = sum(s.value for s in samples
                if any(f.kind is kind and "hs_spin" in f.name for f in s.stack))
    assert total >= 100, f"{total} samples of the renamed {runtime}"
    assert named >= 0.8 * total, (f"{named} of {total} samples with a {kind.value} frame hs_spin; a stack: "
                                  f"{[f.name for f in samples[-1].stack][:12]}")
