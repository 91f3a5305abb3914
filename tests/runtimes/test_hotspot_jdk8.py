"""Java frames of OpenJDK 8 (Debian unstable's openjdk-8-jdk-headless, in its root filesystem), whose
HotSpot is laid out unlike 11's and later: one code heap (CodeCache::_heap, no _low_bound/_high_bound),
an nmethod's scopes at an offset from it, an interpreter frame's bytecode pointer a slot nearer its frame
pointer (fp[-7]: no mirror slot), and the VM's own version HotSpot's (25.x, the JDK's is 8).

Its C2 puts no safepoint in a counted loop, so a compiled loop's code keeps no debug info: the hot
methods' compiled frames are named without their line, and hotstack says so (a warning, `hotstack
doctor --pid`); with -XX:+DebugNonSafepoints they have it. The callers' lines (compiled at a call,
or interpreted: the bytecode pointer in the frame) are there either way."""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.runtimes.common.files import UNREAD
from hotstack.sampling import Engine, EngineConfig

from .matrix import INSIDE, WORKLOADS, compiled, extracted

pytestmark = pytest.mark.root

JAVA8 = "/usr/lib/jvm/java-8-openjdk-amd64/bin/java"
SOURCE = (WORKLOADS / "Work.java").read_text().splitlines()


def _line(pattern: str, after: str = "") -> int:
    """The 1-based line of Work.java matching `pattern` (the first after the line matching `after`)."""
    start = next(i for i, text in enumerate(SOURCE) if re.search(after, text)) if after else 0
    return next(i + 1 for i in range(start, len(SOURCE)) if re.search(pattern, SOURCE[i]))


LOOP = {"hot_a": _line(r"\bfor\b", r"long hot_a\("), "hot_b": _line(r"\bfor\b", r"long hot_b\(")}
CALLS = {"work": _line(r"hot_a\(400000\)"), "main": _line(r"^\s*work\(\);")}


@pytest.fixture(scope="module")
def sid_root() -> Path:
    """Debian unstable's root, with Work.class compiled for Java 8 by its own javac."""
    root = extracted("sid")
    assert (root / JAVA8.lstrip("/")).exists(), f"no {JAVA8} in {root}: .ci/install.d/rootfs.sh installs it"
    compiled(root)
    return root


def _profile_jdk8(root: Path, flags: list[str], want: int = 600, seconds: float = 90.0):
    """Work run by JDK 8 in a mount namespace of its own (its /proc, chroot), profiled from the host
    until its busiest thread has `want` samples: (that thread's samples, what hotstack noted of it,
    what `hotstack doctor --pid` says of it, the footers' count of processes read in part)."""
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                             'mount -t proc proc "$0/proc" && cd "$0" && exec chroot . "$@"', str(root),
                             JAVA8, *flags, "-cp", INSIDE, "Work"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("ready"), proc.stderr.read()
        per_tid: collections.Counter = collections.Counter()
        samples, partly = [], 0
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,), unwind="kernel")) as prof:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and max(per_tid.values(), default=0) < want:
                time.sleep(0.5)
                profile = prof.collect()[0]
                partly += profile.stats.runtimes_partly_read
                for s in profile.samples:
                    if s.pid == proc.pid:
                        samples.append(s)
                        per_tid[s.tid] += s.value
        noted = UNREAD.of(proc.pid)
        doctor = subprocess.run([sys.executable, "-m", "hotstack", "doctor", "--pid", str(proc.pid)],
                                capture_output=True, text=True, timeout=120).stdout
    finally:
        proc.kill()
        proc.wait()
    assert per_tid, "no samples"
    tid = per_tid.most_common(1)[0][0]
    return [s for s in samples if s.tid == tid], noted, doctor, partly


def _frame(sample, method: str):
    return next((f for f in sample.stack if f.kind is FrameKind.JAVA and f.name == f"Work.{method}"), None)


def _share(samples, test) -> float:
    return sum(s.value for s in samples if test(s)) / sum(s.value for s in samples)


def _check_frames_and_callers(samples) -> tuple[list, list]:
    """The hot methods named, 75/25, the callers with their file and line; (hot_a's, hot_b's) samples."""
    a = [s for s in samples if _frame(s, "hot_a")]
    b = [s for s in samples if _frame(s, "hot_b") and not _frame(s, "hot_a")]
    total = sum(s.value for s in samples)
    hot = sum(s.value for s in a + b)
    assert total >= 300 and hot >= 0.9 * total, (total, hot, [f.name for f in samples[0].stack][:12])
    split = 100 * sum(s.value for s in a) / hot
    assert abs(split - 75) <= 7, split
    for method, line in CALLS.items():
        with_line = _share(a + b, lambda s: (f := _frame(s, method)) is not None and f.file == "Work.java"
                           and f.line == line)
        assert with_line >= 0.9, (method, with_line, [(f.name, f.file, f.line) for f in samples[0].stack][:6])
    return a, b


def _loop_lines(a: list, b: list) -> float:
    return (_share(a, lambda s: _frame(s, "hot_a").line == LOOP["hot_a"]) * len(a)
            + _share(b, lambda s: _frame(s, "hot_b").line == LOOP["hot_b"]) * len(b)) / (len(a) + len(b))


def test_jdk8_compiled_frames_named_and_their_loops_said_without_lines(sid_root):
    samples, noted, doctor, partly = _profile_jdk8(sid_root, [])
    a, b = _check_frames_and_callers(samples)
    assert _loop_lines(a, b) < 0.1          # (no debug info there: no line, never a wrong one)
    [note] = noted
    assert note.version.startswith("8 (HotSpot 25.") and note.partial == "the lines of frames in C2-compiled loops"
    assert "-XX:+DebugNonSafepoints" in note.reason, note.reason
    assert partly == 1            # (the footer's count)
    assert "runtime Java 8 (HotSpot 25." in doctor and "read without the lines of frames in C2-compiled loops: JDK 8's" \
        in doctor, doctor


def test_jdk8_compiled_loops_have_lines_with_debug_info_everywhere(sid_root):
    samples, noted, doctor, partly = _profile_jdk8(sid_root, ["-XX:+UnlockDiagnosticVMOptions",
                                                               "-XX:+DebugNonSafepoints"])
    a, b = _check_frames_and_callers(samples)
    assert _loop_lines(a, b) >= 0.9
    assert noted == [] and partly == 0 and "runtime Java: read (its frames are named)" in doctor and "without" not in doctor, doctor


def test_jdk8_interpreted_frames_have_their_lines(sid_root):
    """-Xint: every frame interpreted; a caller's line from the bytecode pointer in its frame (JDK 8's
    slot), the running one's from the register."""
    samples, noted, _doctor, _partly = _profile_jdk8(sid_root, ["-Xint"], want=400)
    a, b = _check_frames_and_callers(samples)
    assert _loop_lines(a, b) >= 0.9
    assert [n.partial for n in noted] == ["the lines of frames in C2-compiled loops"]
