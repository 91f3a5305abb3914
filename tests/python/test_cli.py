"""`hotstack run profile_cpu --python/--no-python` on a real CPython process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyframes_helpers import HERE, INTERPRETERS

pytestmark = pytest.mark.root


def _run(pid: int, *flags: str) -> str:
    return subprocess.run([sys.executable, "-m", "hotstack", "run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(pid), "--timeout", "1.5",
                           "--sample-rate", "199", "-o", "folded", *flags],
                          capture_output=True, text=True, timeout=120, check=True).stdout


def test_python_flag():
    if not INTERPRETERS:
        pytest.skip("no CPython 3.8+ interpreter on this machine")
    python = INTERPRETERS[-1][1]
    w = subprocess.Popen([python, str(HERE / "workload_abc.py"), "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout.readline().strip() == "ready"
        on = _run(w.pid)
        off = _run(w.pid, "--no-python")
    finally:
        w.kill()
        w.wait()
    assert ";main;caller;a;spin" in on
    assert ";caller;" not in off and "_PyEval_EvalFrameDefault" in off
