"""Each runtime of Debian 13 run in a plain chroot (no mount namespace of its own), profiled from the
host: its maps show paths from the host's root, which no path under its own root reaches, so its
files are opened through its own mappings. Runtimes the tree reads have their frames named; one it
recognizes and cannot read is said (a warning, the footer's count, `hotstack doctor --pid`).

The root filesystem is Debian's own packages (`.ci/install.d/rootfs.sh`, mmdebstrap, cached):
Node.js as Debian builds it (V8 in libnode), Ruby with a stripped libruby."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig
from hotstack.runtimes.common.files import UNREAD

from ..conftest import hotstack
from .frames_harness import SPIN
from .matrix import extracted

pytestmark = pytest.mark.root



# each runtime's command and its flag that runs the code after it (SPIN)
READ = {
    "python3": (["python3", "-c"], FrameKind.PYTHON),
    "node": (["node", "-e"], FrameKind.JS),
    "php": (["php", "-r"], FrameKind.PHP),
    "perl": (["perl", "-e"], FrameKind.PERL),
    "ruby": (["ruby", "-e"], FrameKind.RUBY),    # 3.3: ruby_current_ec found through libruby's code
}


@pytest.fixture(scope="session")
def trixie_root() -> Path:
    """Debian 13's root filesystem, extracted once from its cached tar (by the tar's own name)."""
    return extracted("trixie")


def _in_chroot(root: Path, argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(["chroot", str(root), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _profile(pid: int, want: int = 300, seconds: float = 12.0):
    """Samples of `pid` until `want` of them or `seconds` (a busy machine gives it little CPU), and the
    profiles' footers' counts of unread runtime processes."""
    samples, unread = [], 0
    with Engine(EngineConfig(frequency=499, pids=(pid,), unwind="kernel")) as prof:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and sum(s.value for s in samples) < want:
            time.sleep(0.5)
            profile = prof.collect()[0]
            samples.extend(s for s in profile.samples if s.pid == pid)
            unread += profile.stats.runtimes_unread
    return samples, unread


@pytest.mark.parametrize("program", sorted(READ))
def test_runtime_frames_in_a_plain_chroot(trixie_root, program):
    argv, kind = READ[program]
    proc = _in_chroot(trixie_root, [*argv, SPIN[kind]])
    try:
        time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
        # a plain chroot: the host's mount namespace, and a root that is not the host's
        assert os.readlink(f"/proc/{proc.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
        assert os.stat(f"/proc/{proc.pid}/root/").st_ino == os.stat(trixie_root).st_ino
        samples, _unread = _profile(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    total = sum(s.value for s in samples)
    assert total >= 100, f"{total} samples of {program}"
    # (hs_spin with its class or package where the runtime names one: PHP's Class::, Ruby's Object#)
    named = sum(s.value for s in samples
                if any(f.kind is kind and f.name.split("::")[-1].split("#")[-1].startswith("hs_spin")
                       for f in s.stack))
    assert named >= 0.9 * total, (f"{named} of {total} samples with {kind.value} frame hs_spin; a stack: "
                                  f"{[f.name for f in samples[0].stack][:12]}")
    # the runtime's frames in place of the interpreter's, the native ones below reaching the root.
    # Not PHP 8.4 of Debian 13 yet: its hybrid VM runs the handlers in code no symbol names (not
    # the exported execute_ex), so the PHP frames go at the root end, as without an anchor
    if program == "php":
        return
    rooted = sum(s.value for s in samples if s.stack and s.stack[-1].name == "_start")
    assert rooted >= 0.9 * total, (f"{rooted} of {total} samples rooted at _start; a stack: "
                                   f"{[f.name for f in samples[0].stack][-12:]}")


SPLIT = ("def hs_a():\n    n = 0\n    for i in range(300000): n += i\n"
         "def hs_b():\n    n = 0\n    for i in range(100000): n += i\n"
         "while True:\n    hs_a(); hs_b()\n")
PHP_SPLIT = ("function hs_a() { $n = 0; for ($i = 0; $i < 300000; $i++) { $n += $i; } }\n"
             "function hs_b() { $n = 0; for ($i = 0; $i < 100000; $i++) { $n += $i; } }\n"
             "while (true) { hs_a(); hs_b(); }\n")
PERL_SPLIT = ("sub hs_a { my $n = 0; for my $i (1 .. 300000) { $n += $i } }\n"
              "sub hs_b { my $n = 0; for my $i (1 .. 100000) { $n += $i } }\n"
              "while (1) { hs_a(); hs_b() }\n")


def _split(root: Path, argv: list[str], kind: FrameKind, rooted: bool = True) -> None:
    """`argv` in a chroot of `root` runs hs_a and hs_b 3:1: never said unread, its frames named (hs_a,
    hs_b: Perl's main::hs_a too), a 75/25 split within 10 points and, where `rooted`, stacks to _start
    (the runtime's frames in place of the interpreter's)."""
    proc = _in_chroot(root, argv)
    try:
        time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
        samples, unread = _profile(proc.pid, want=300, seconds=20)
    finally:
        proc.kill()
        proc.wait()
    assert unread == 0
    total = sum(s.value for s in samples)
    a, b = (sum(s.value for s in samples if any(f.kind is kind and f.name.split("::")[-1] == name for f in s.stack))
            for name in ("hs_a", "hs_b"))
    assert total >= 100 and a + b >= 0.8 * total, (total, a, b, [f.name for f in samples[0].stack][:12])
    assert abs(100 * a / (a + b) - 75) <= 10, (a, b)
    if rooted:
        at_root = sum(s.value for s in samples if s.stack and s.stack[-1].name == "_start")
        assert at_root >= 0.9 * total, (at_root, total, [f.name for f in samples[0].stack][-12:])


@pytest.mark.parametrize("version", ["3.14", "3.15"])
def test_cpython_of_debian_unstable(version):
    """Debian's CPython 3.14 and 3.15 (its python3.15 beside the default): their _Py_DebugOffsets in
    the released layouts (3.15's thread state longer), and their evaluation loops split by GCC into
    a part no symbol names (most of the handlers run there): frames named, in place of the loop's
    frames (stacks reach _start), a 75/25 split within 10 points."""
    _split(extracted("sid"), [f"python{version}", "-c", SPLIT], FrameKind.PYTHON)


def test_php_of_debian_experimental():
    """Debian experimental's PHP 8.5 (php8.5-cli): its executor_globals' current_execute_data 24 bytes
    further on than 8.4's: frames named, a 75/25 split within 10 points. (Its frames' place against
    the native stack as in test_runtime_frames_in_a_plain_chroot: not checked.)"""
    _split(extracted("experimental"), ["php8.5", "-r", PHP_SPLIT], FrameKind.PHP, rooted=False)


def test_perl_of_debian_experimental():
    """Debian experimental's Perl 5.44 (its root of its own): frames named in place of the runloop's
    (stacks reach _start), a 75/25 split within 10 points."""
    _split(extracted("experimental-perl"), ["perl", "-e", PERL_SPLIT], FrameKind.PERL)


def test_a_ruby_that_cannot_be_read_is_said(trixie_root):
    """A Ruby newer than hotstack knows (Debian 13's libruby with its version string made 3.9 in a
    copy): every process of it is said, a warning, the footer's count and doctor's explanation,
    and sampled on without Ruby frames, never with frames read by another version's offsets."""
    [lib] = [p for p in (trixie_root / "usr/lib/x86_64-linux-gnu").glob("libruby-3.3.so.3.3.*") if not p.is_symlink()]
    data = bytearray(lib.read_bytes())
    from hotstack.symbols.elf import ElfFile
    from hotstack.runtimes.common.files import symbols
    with ElfFile(str(lib)) as elf:
        at = elf.vaddr_to_file_offset(symbols(elf, (b"ruby_version",))[b"ruby_version"])
    assert data[at:at + 4] == b"3.3."
    data[at:at + 4] = b"3.9."
    private = trixie_root / "tmp" / f"hotstack-test-{os.getpid()}"
    private.mkdir()
    try:
        (private / lib.name).write_bytes(bytes(data))
        (private / lib.name.rsplit(".", 1)[0]).symlink_to(lib.name)   # libruby-3.3.so.3.3, its soname
        proc = _in_chroot(trixie_root, ["env", f"LD_LIBRARY_PATH=/{private.relative_to(trixie_root)}",
                                        "ruby", "--disable-gems", "-e", SPIN[FrameKind.RUBY]])
        # (--disable-gems: rbconfig checks the version)
        try:
            time.sleep(0.5)
            assert proc.poll() is None, proc.stderr.read()
            samples, unread = _profile(proc.pid, want=50, seconds=6)
            doctor = hotstack("doctor", "--pid", str(proc.pid))
        finally:
            proc.kill()
            proc.wait()
    finally:
        subprocess.run(["rm", "-rf", str(private)], check=True)
    assert samples and not any(f.kind is FrameKind.RUBY for s in samples for f in s.stack)
    assert unread >= 1
    [noted] = UNREAD.of(proc.pid)
    assert (noted.runtime, noted.version.split(".")[:2]) == ("Ruby", ["3", "9"])
    assert str(private.relative_to(trixie_root)) in noted.file and "no structure offsets" in noted.reason
    assert doctor.returncode == 0, doctor.stderr
    assert "Ruby 3.9" in doctor.stdout and "NOT read" in doctor.stdout, doctor.stdout
