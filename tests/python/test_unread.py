"""A process that maps CPython but whose interpreter state is never found (a program that links
libpython and never starts the interpreter; as a build whose layout hotstack does not read would
look): after the retry ladder's last look it is said (a warning, the footer's count, `hotstack
doctor --pid`), never left silent."""

from __future__ import annotations

import logging
import subprocess
import sysconfig
import time
from pathlib import Path

import pytest

from hotstack.runtimes.common.files import UNREAD
from hotstack.runtimes.common.retries import RETRY_AGES
from hotstack.sampling import Engine, EngineConfig

pytestmark = pytest.mark.root


def _links_libpython(tmp_path: Path) -> Path:
    libdir, version = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDVERSION")
    source = tmp_path / "embeds.c"
    source.write_text("void Py_Initialize(void);\n"
                      "int main(int argc, char **argv) { volatile unsigned long n = 0; if (argc > 5) Py_Initialize();"
                      " for (;;) n++; }\n")   # (on the CPU: a process is met at its samples)
    out = tmp_path / "embeds"
    subprocess.run(["cc", str(source), "-o", str(out), f"-L{libdir}", f"-lpython{version}", f"-Wl,-rpath,{libdir}"],
                   check=True)
    return out


def test_a_process_whose_interpreter_is_never_found_is_said(tmp_path, caplog):
    program = _links_libpython(tmp_path)
    with caplog.at_level(logging.WARNING, logger="hotstack.runtimes"), \
            Engine(EngineConfig(frequency=99, unwind="kernel")) as engine:
        engine.collect()
        proc = subprocess.Popen([str(program)])
        try:
            unread = 0
            deadline = time.monotonic() + RETRY_AGES[-1] + 10
            while not UNREAD.of(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.3)
                unread += engine.collect()[0].stats.runtimes_unread
            unread += engine.collect()[0].stats.runtimes_unread
        finally:
            proc.kill()
            proc.wait()
    [noted] = UNREAD.of(proc.pid)
    assert noted.runtime == "CPython" and "runtime state was not found" in noted.reason, noted
    # (other processes of a busy host may be unread in the same window: the pid's own note is one)
    assert unread >= 1
    assert any(f"pid {proc.pid}: CPython" in r.getMessage() for r in caplog.records)


def test_an_exec_makes_the_pid_a_new_process_to_note():
    """A pid whose image could not be read, then exec'ed into another unreadable runtime image (or
    reused by one): noted again and counted, not taken for the process noted before."""
    from hotstack.runtimes.common.files import UnreadProcess, UnreadRuntimes

    unread = UnreadRuntimes()
    unread.note(("a",), UnreadProcess(4242, "Ruby", "3.9.0", "/usr/lib/libruby.so", "unknown version"))
    unread.note(("a",), UnreadProcess(4242, "Ruby", "3.9.0", "/usr/lib/libruby.so", "unknown version"))
    assert unread.counts == {"Ruby": 1} and unread.take_new() == (1, 0)
    unread.forget(4242)
    assert unread.of(4242) == []
    unread.note(("b",), UnreadProcess(4242, "Ruby", "3.9.1", "/opt/libruby.so", "unknown version"))
    assert unread.counts == {"Ruby": 2} and unread.take_new() == (1, 0)
    assert [u.version for u in unread.of(4242)] == ["3.9.1"]


def test_a_runtime_read_in_part_is_counted_apart():
    """A process whose frames are named without some lines (JDK 8's compiled loops) is noted and
    counted as read in part, never as unread (it has its runtime frames)."""
    from hotstack.runtimes.common.files import UnreadProcess, UnreadRuntimes

    unread = UnreadRuntimes()
    part = UnreadProcess(77, "Java", "8 (HotSpot 25.504-b01)", "/usr/lib/jvm/libjvm.so", "no debug info",
                         partial="the lines of frames in C2-compiled loops")
    unread.note(("j",), part)
    unread.note(("j",), part)
    assert unread.partly == {"Java": 1} and unread.take_new() == (0, 1) and unread.take_new() == (0, 0)
    assert unread.counts == {}
    assert unread.of(77) == [part] and "named without the lines of frames in C2-compiled loops" in part.line()


def test_the_footer_says_processes_read_in_part_and_unread():
    from hotstack.gadget.output import footer
    from hotstack.profile.model import Profile, ProfileStats

    profile = Profile(samples=[], start_ns=0, duration_ns=10**9, frequency_hz=99,
                      stats=ProfileStats(runtimes_unread=2, runtimes_partly_read=1))
    text = footer(profile, shown=0, distinct=0)
    assert "2 processes of a runtime not read" in text
    assert "1 processes of a runtime read in part, some frames without their line" in text
    assert "read in part" not in footer(Profile(samples=[], start_ns=0, duration_ns=10**9, frequency_hz=99), shown=0,
                                            distinct=0)
