"""`hotstack top` in a real terminal (tmux), against a real workload with a known hot function:
the rows, the keys (sort, filter, clear, quit) and a screenshot, as a user over SSH would see them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import ROOT, compile_c, hotstack
from ..peers import require_tool
from ..screenshots import png_size, publish, terminal_png

pytestmark = pytest.mark.root
HERE = Path(__file__).resolve().parent
COLUMNS, LINES = 120, 24
# -fno-optimize-sibling-calls: top_outer's last call to top_spin stays a call, so every sample
# of top_spin has top_outer under it (a tail call would leave main as the caller).
FLAGS = ("-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-optimize-sibling-calls")
ROW = re.compile(r"^\s*(\d+\.\d)\s+(\d+\.\d)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")


@pytest.fixture(scope="module")
def top_busy(tmp_path_factory) -> Path:
    return compile_c(HERE / "workloads" / "top_busy.c", tmp_path_factory.mktemp("top") / "top_busy", *FLAGS)


class Tmux:
    """A tmux server of our own (its own socket), stopped by the test that started it."""

    def __init__(self, socket: Path) -> None:
        self.tmux = require_tool("tmux")
        self.socket = socket

    def __call__(self, *args: str) -> str:
        r = subprocess.run([self.tmux, "-S", str(self.socket), *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def screen(self, colours: bool = False) -> str:
        return self("capture-pane", "-p", *(["-e"] if colours else []), "-t", "top")

    def wait_for(self, predicate, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if predicate(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"the screen never showed what was expected:\n{text}")
            time.sleep(0.2)

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", "top", *keys)

    def kill(self) -> None:
        subprocess.run([self.tmux, "-S", str(self.socket), "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path / "tmux.sock")
    yield t
    t.kill()


def rows(screen: str) -> list[tuple[float, float, int, int, str, str]]:
    out = []
    for line in screen.splitlines():
        m = ROW.match(line)
        if m:
            out.append((float(m[1]), float(m[2]), int(m[3]), int(m[4]), m[5], m[6]))
    return out


def start_top(tmux: Tmux, *args: str, stderr: Path) -> None:
    command = " ".join(["exec", sys.executable, "-X", "faulthandler", "-m", "hotstack", "top", *args, "2>" + str(stderr)])
    tmux("new-session", "-d", "-s", "top", "-x", str(COLUMNS), "-y", str(LINES), "-c", str(ROOT), command)
    tmux("set-option", "-t", "top", "remain-on-exit", "on")


def test_top_live_view_keys_and_screenshot(top_busy, workloads, tmux, tmp_path):
    busy = workloads([top_busy, "120"])
    stderr = tmp_path / "top.stderr"
    start_top(tmux, "--pid", str(busy.pid), "--interval", "0.5", stderr=stderr)
    # The hot leaf, once enough samples are in: top_spin has nearly all self samples, top_outer
    # and main none of their own but every sample in total.
    screen = tmux.wait_for(lambda s: sum(r[3] for r in rows(s) if r[4] == "top_spin") >= 40)
    table = rows(screen)
    assert table[0][4] == "top_spin", screen                     # sorted by self
    spin = next(r for r in table if r[4] == "top_spin")
    outer = next(r for r in table if r[4] == "top_outer")
    assert spin[0] >= 90 and spin[5] == "top_busy", screen
    assert outer[2] == 0 and outer[1] >= 90, screen
    assert f"pid {busy.pid}" in screen and "sort: self" in screen

    png = terminal_png(tmux.screen(colours=True), tmp_path / "top.png", COLUMNS, tmp_path / "chromium")
    assert png_size(png)[0] > 900
    publish(png, "top.png")

    # n: by name (alphabetical); t: by total (top_spin is no longer guaranteed first, but the
    # first row has the largest total).
    tmux.keys("n")
    screen = tmux.wait_for(lambda s: "sort: name" in s)
    names = [r[4] for r in rows(screen)]
    assert names == sorted(names), screen
    tmux.keys("t")
    screen = tmux.wait_for(lambda s: "sort: total" in s)
    totals = [r[3] for r in rows(screen)]
    assert totals == sorted(totals, reverse=True) and totals[0] >= spin[3], screen

    # /outer Enter: only matching rows; Esc clears.
    tmux.keys("/", "o", "u", "t", "e", "r", "Enter")
    screen = tmux.wait_for(lambda s: "filter: outer" in s and "_" not in s.split("filter: outer")[1][:1])
    assert [r[4] for r in rows(screen)] == ["top_outer"], screen
    tmux.keys("Escape")
    screen = tmux.wait_for(lambda s: "filter:" not in s and "top_spin" in s)

    # q: quits, with the terminal given back (exit status 0).
    tmux.keys("q")
    deadline = time.monotonic() + 40
    while True:
        dead, _, status = tmux("display-message", "-p", "-t", "top", "#{pane_dead} #{pane_dead_status} #{pane_pid}"
                               ).strip().partition(" ")
        status, _, pid = status.rpartition(" ")
        if dead == "1" and status == "0":
            break
        # tmux 3.3a at times marks the pane dead but leaves its exited process unreaped (a zombie,
        # so no status): top did quit and give the terminal back, which is what a user sees.
        if dead == "1" and not status and _state(int(pid)) in ("Z", None):
            break
        if time.monotonic() > deadline:
            state = tmux("display-message", "-p", "-t", "top", "#{pane_dead} #{pane_dead_status} #{pane_dead_signal} #{pane_pid}")
            os.kill(int(tmux("display-message", "-p", "-t", "top", "#{pane_pid}")), signal.SIGABRT)
            time.sleep(1)
            raise AssertionError(f"top did not quit on q ({state}):\n{stderr.read_text()}\n{tmux.screen()}")
        time.sleep(0.2)


def _state(pid: int) -> str | None:
    """A process's state letter (R, S, Z...), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except OSError:
        return None


def test_top_whole_host_folds_hotstack_and_sees_the_workload(top_busy, workloads):
    """Whole host, no terminal: one table per interval, the workload's hot function among them,
    hotstack's own samples (if any) in one row, never its functions."""
    workloads([top_busy, "60"])
    r = hotstack("top", "--timeout", "4", "--interval", "1", "--rate", "199", timeout=120)
    assert r.returncode == 0, r.stderr
    last = r.stdout.split("hotstack top")[-1]
    names = [row[4] for row in rows(last)]
    assert "top_spin" in names, r.stdout[-3000:]
    assert "whole host" in last and "hotstack's own samples in one row" in last


def test_top_bad_flags_one_line():
    for args, words in ((["--pid", "999999999"], "--pid 999999999: no such process"),
                        (["--rate", "5000"], "--rate 5000"), (["--interval", "0"], "--interval"),
                        (["--comm", "x" * 20], "--comm")):
        r = hotstack("top", *args, "--timeout", "1")
        assert r.returncode == 2, (args, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
