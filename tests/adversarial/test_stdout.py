"""`hotstack run` (each -o) and `hotstack top` with stdout closed (`>&-`) or on a full disk
(/dev/full): one line on stderr and a non-zero exit, never a traceback. Outputs that write a file
do not need stdout and run as usual."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from hotstack.gadget.output import STDOUT_MODES

pytestmark = pytest.mark.root

FILE_MODES = [("pprof", "p.pb.gz"), ("flamegraph", "f.html"), ("folded", "f.folded"), ("none", "")]


@pytest.fixture
def busy(workloads):
    """A process that always has samples, so that every output has something to write."""
    return workloads([shutil.which("sh"), "-c", "while :; do :; done"])


def hotstack_with_stdout(stdout: str, *args: str) -> subprocess.CompletedProcess:
    """The CLI with its stdout closed (stdout="closed") or redirected to a path."""
    redirect = ">&-" if stdout == "closed" else f">{stdout}"
    return subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "hotstack", *args],
                          capture_output=True, text=True, timeout=120)


def run_args(busy, mode: str, *more: str) -> list[str]:
    return ["run", "profile_cpu", "--pid", str(busy.pid), "--timeout", "1", "--map-fetch-interval", "0",
            "-o", mode, *more]


def one_line(r: subprocess.CompletedProcess, code: int, fragment: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], r.stderr


@pytest.mark.parametrize("mode", STDOUT_MODES)
def test_closed_stdout_is_refused_before_starting(busy, mode):
    one_line(hotstack_with_stdout("closed", *run_args(busy, mode)), 2, f"-o {mode} prints to stdout, which is closed")


@pytest.mark.parametrize("mode", STDOUT_MODES)
def test_full_stdout_is_one_line(busy, mode):
    one_line(hotstack_with_stdout("/dev/full", *run_args(busy, mode)), 1,
             "cannot write to stdout: No space left on device")


@pytest.mark.parametrize("mode, name", FILE_MODES)
def test_outputs_to_a_file_need_no_stdout(busy, tmp_path, mode, name):
    more = ("--file", str(tmp_path / name)) if name else ()
    for stdout in ("closed", "/dev/full"):
        r = hotstack_with_stdout(stdout, *run_args(busy, mode, *more))
        assert r.returncode == 0 and "Traceback" not in r.stderr, (stdout, r.stderr[-2000:])
        if name:
            assert (tmp_path / name).stat().st_size > 0
            (tmp_path / name).unlink()


def test_top_with_stdout_closed_or_full(busy):
    args = ("top", "--pid", str(busy.pid), "--timeout", "2", "--interval", "0.5")
    one_line(hotstack_with_stdout("closed", *args), 2, "hotstack top draws on stdout, which is closed")
    one_line(hotstack_with_stdout("/dev/full", *args), 1, "cannot write to stdout: No space left on device")
