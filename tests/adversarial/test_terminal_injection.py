"""A local process drives the operator's terminal through hotstack: a comm and a symbol name made of
escape sequences (window title, colours, clear screen) and a bidirectional override. Every
terminal output escapes them; the machine outputs keep the bytes."""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hotstack.text import EscapingFormatter, escape

from ..conftest import ROOT, compile_c, wait_until_sampling
from ..peers import require_tool
from ..top.test_top import COLUMNS, LINES, Tmux

pytestmark = pytest.mark.root

# The symbol sets the window title (OSC 0) and colours; the comm clears the screen; both carry
# U+202E (RIGHT-TO-LEFT OVERRIDE); "[/b]" is rich's markup. A comm holds at most 15 bytes.
SYMBOL = "esc\x1b[31mred\x1b[0m\x1b]0;T\x07\u202ertl[/b]"
COMM = "a\x1b[2Jb\u202e"
RAW = ("\x1b", "\x07", "\u202e", "\x9b")

SOURCE = r"""
#include <sys/prctl.h>
#define HOSTILE "esc\x1b[31mred\x1b[0m\x1b]0;T\x07\xe2\x80\xae" "rtl[/b]"
__attribute__((noinline)) void spin(void) __asm__(HOSTILE);
__attribute__((noinline)) void spin(void) { for (volatile unsigned long i = 0; ; i++) ; }
__attribute__((noinline)) void outer(void) { spin(); }
int main(void) {
    prctl(PR_SET_NAME, "a\x1b[2Jb\xe2\x80\xae");
    outer();
}
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """A program whose hot function's symbol and whose comm are escape sequences. clang: GNU as
    refuses those bytes in a label, LLVM's integrated assembler quotes them."""
    d = tmp_path_factory.mktemp("inject")
    (d / "hostile.c").write_text(SOURCE)
    binary = compile_c(d / "hostile.c", d / "hostile", "-O1", "-fno-omit-frame-pointer",
                       compiler=require_tool("clang"))
    nm = subprocess.run(["nm", str(binary)], capture_output=True, check=True).stdout
    assert SYMBOL.encode() in nm      # the name really is in the binary, bytes and all
    return binary


@pytest.fixture
def spinner(hostile, workloads):
    w = workloads([hostile])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{w.pid}/comm").read_bytes().rstrip(b"\n") != COMM.encode():
        assert time.monotonic() < deadline, Path(f"/proc/{w.pid}/comm").read_bytes()
        time.sleep(0.05)
    return w


def run_bytes(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hotstack", *args], capture_output=True, timeout=timeout)


def assert_escaped(out: bytes) -> str:
    text = out.decode("utf-8")
    raw = [c for c in RAW if c in text]
    assert not raw, (raw, text[-3000:])
    return text


def profile(spinner, output: str) -> subprocess.CompletedProcess:
    r = run_bytes("run", "profile_cpu", "--pid", str(spinner.pid), "--timeout", "3", "--map-fetch-interval", "0",
                  "--sample-rate", "99", "-o", output)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    return r


def leaves(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from leaves(v)
    else:
        yield node


def test_columns_escape_the_symbol_and_the_comm(spinner):
    text = assert_escaped(profile(spinner, "columns").stdout)
    # Seen as the escapes they are (the table cuts long cells, so the start of each is asked).
    assert r"esc\x1b[31mred" in text, text[-3000:]
    assert r"a\x1b[2Jb" in text, text[-3000:]


def test_machine_outputs_keep_the_bytes(spinner):
    """-o json and folded are read by programs: the names as they are (JSON-escaped in json)."""
    rows = [json.loads(line) for line in profile(spinner, "json").stdout.splitlines() if line.strip()]
    values = [v for row in rows for v in leaves(row)]
    assert any(SYMBOL in v for v in values if isinstance(v, str)), rows[:3]
    assert COMM in values, rows[:3]
    folded = profile(spinner, "folded").stdout.decode("utf-8")
    # ';' separates frames in folded stacks: a name's own is written ':'
    assert SYMBOL.replace(";", ":") in folded and COMM in folded, folded[-2000:]


def test_top_without_a_terminal_escapes_them(spinner):
    r = run_bytes("top", "--pid", str(spinner.pid), "--timeout", "4", "--interval", "1")
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    text = assert_escaped(r.stdout)
    assert r"esc\x1b[31mred" in text, text[-3000:]


def test_top_in_a_terminal_sets_no_title_and_clears_nothing(spinner, tmp_path):
    """The live view in a terminal (tmux), through script(1), which records every byte top writes:
    rich's own sequences are there, the workload's are not, and the pane's title is unchanged."""
    tmux = Tmux(tmp_path / "tmux.sock")
    raw, stderr = tmp_path / "raw", tmp_path / "top.stderr"
    top = f"{sys.executable} -m hotstack top --pid {spinner.pid} --interval 0.5 2>{stderr}"
    try:
        tmux("new-session", "-d", "-s", "top", "-x", str(COLUMNS), "-y", str(LINES), "-c", str(ROOT),
             f"exec {require_tool('script')} -q -f -e -c {shlex.quote(top)} {raw}")
        tmux("set-option", "-t", "top", "remain-on-exit", "on")
        title = tmux("display-message", "-p", "-t", "top", "#{pane_title}").strip()
        tmux.wait_for(lambda s: r"esc\x1b[31mred" in s)
        tmux.keys("q")
        deadline = time.monotonic() + 40
        while tmux("display-message", "-p", "-t", "top", "#{pane_dead}").strip() != "1":
            assert time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.2)
        assert tmux("display-message", "-p", "-t", "top", "#{pane_title}").strip() == title
    finally:
        tmux.kill()
    written = raw.read_bytes()
    assert r"esc\x1b[31mred".encode() in written and b"\x1b[?1049h" in written   # the escape; rich's screen
    for sequence in (b"\x1b[31mred", b"\x1b]0;T", b"\x07", b"\x1b[2Jb", "\u202e".encode()):
        assert sequence not in written, (sequence, written[-2000:])


# Every C0 and C1 control, DEL, and the bidirectional marks, embeddings, overrides and isolates.
UNSAFE = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x61C, 0x200E, 0x200F,
                           *range(0x202A, 0x202F), *range(0x2066, 0x206A))]


def test_escape_leaves_no_control_or_bidi_character():
    """The one function all terminal output goes through (columns, top, errors, logs)."""
    escaped = escape("".join(f"<{c}>" for c in UNSAFE))
    assert not [c for c in escaped if c in UNSAFE]
    assert escaped.startswith(r"<\x00><\x01>") and r"<\x7f><\x80>" in escaped and r"<\u202e>" in escaped
    assert escape("std::vector<int>::at(unsigned long) [clone .cold] é") == \
        "std::vector<int>::at(unsigned long) [clone .cold] é"
    assert escape(b"bad\xffbyte") == r"bad\xffbyte"


def test_log_lines_are_escaped():
    record = logging.LogRecord("hotstack.test", logging.WARNING, __file__, 1, "cannot read %s", (COMM,), None)
    line = EscapingFormatter("%(levelname)s %(message)s").format(record)
    assert line == r"WARNING cannot read a\x1b[2Jb\u202e"


def test_top_takes_a_comm_that_looks_like_markup(tmp_path):
    """`hotstack top --comm '[/x]'` in a terminal: its starting line read the comm as rich markup
    and ended in a MarkupError traceback."""
    top = f"{sys.executable} -m hotstack top --comm '[/x]' --timeout 1"
    r = subprocess.run([require_tool("script"), "-q", "-e", "-c", top, str(tmp_path / "raw")],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    written = (tmp_path / "raw").read_bytes()
    assert r.returncode == 0 and b"Traceback" not in written, written[-3000:]
    assert b"starting the sampler (comm [/x])" in written, written[-3000:]
