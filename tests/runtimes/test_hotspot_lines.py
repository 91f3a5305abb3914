"""The source file and line of Java frames against the workload's source and JFR's, in one run, for
JDK 11, 17, 21 and 25, interpreted (-Xint: the line of the frame's bytecode pointer, the leaf's
from its register) and compiled (C2's scopes at the frame's pc: the innermost method's bci and
each inlining caller's).

The truth: HotWork.java marks its lines (`// line: WHAT`): each hot loop is one line, each call is
one line, so a sample in heavy() is at the heavy loop's line, called from work()'s line of the
heavy call, called from run()'s line of the work call, whatever bytecode of the loop it was in.
The hot methods begin with a line before their loop: a leaf read from its frame's saved bytecode
pointer (as of its last call out, its entry) would show that line, not the loop's."""

from __future__ import annotations

import collections
import json
import logging
import re
import subprocess
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from .test_hotspot import profile_with_jfr
from .test_hotspot_versions import VERSIONS, WORK, classes, drop_vmstructs_field, jdk_bin  # noqa: F401 (a fixture)

pytestmark = pytest.mark.root

MODES = {"interpreted": ("-Xint",), "compiled": ()}


def marked_lines(source: Path) -> dict[str, int]:
    """{"heavy loop": 15, ...}: the line numbers of the source's `// line: WHAT` marks."""
    out = {}
    for number, text in enumerate(source.read_text().splitlines(), 1):
        found = re.search(r"// line: (.+)$", text)
        if found and not text.lstrip().startswith("//"):
            out[found.group(1).strip()] = number
    return out


MARKS = marked_lines(WORK)


def expected(hot: str) -> tuple[int, int, int]:
    """(run's line, work's line, the hot method's line) of a sample in the hot method's loop."""
    return MARKS["work call"], MARKS[f"{hot} call"], MARKS[f"{hot} loop"]


def our_lines(samples, hot: str) -> collections.Counter:
    """Samples whose Java leaf is HotWork.<hot>, by the lines of their last three Java frames (run,
    work, hot); their frames' files are checked on the way."""
    counts: collections.Counter = collections.Counter()
    for s in samples:
        java = [f for f in reversed(s.stack) if f.kind is FrameKind.JAVA]
        if len(java) < 3 or java[-1].name != f"HotWork.{hot}":
            continue
        assert [f.name for f in java[-3:]] == ["HotWork.run", "HotWork.work", f"HotWork.{hot}"], java
        assert {f.file for f in java[-3:]} == {"HotWork.java"}, java[-3:]
        counts[tuple(f.line for f in java[-3:])] += s.value
    return counts


def jfr_lines(jfr: Path, recording: Path, hot: str) -> collections.Counter:
    """JFR's execution samples whose leaf is HotWork.<hot>, by the lines of run, work and hot."""
    out = subprocess.run([str(jfr), "print", "--json", "--events", "jdk.ExecutionSample", str(recording)],
                         capture_output=True, text=True, check=True, timeout=180).stdout
    counts: collections.Counter = collections.Counter()
    for event in json.loads(out)["recording"]["events"]:
        frames = event["values"]["stackTrace"]["frames"]      # leaf first
        names = [f["method"]["name"] for f in frames[:3]]
        if names == [hot, "work", "run"]:
            counts[tuple(f["lineNumber"] for f in reversed(frames[:3]))] += 1
    return counts


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("version", VERSIONS)
def test_lines_match_source_and_jfr(classes, tmp_path, version, mode):  # noqa: F811
    bin_dir = jdk_bin(version)
    recording = tmp_path / "rec.jfr"
    samples = profile_with_jfr(str(bin_dir / "java"), str(bin_dir / "jcmd"), classes, recording,
                               threads=2, enough=400, flags=MODES[mode])
    for hot in ("heavy", "light"):
        ours = our_lines(samples, hot)
        total = sum(ours.values())
        assert total >= (50 if hot == "heavy" else 15), (hot, ours)
        theirs = jfr_lines(bin_dir / "jfr", recording, hot)
        assert theirs, (hot, "no JFR samples")
        truth = expected(hot)
        # JFR agrees with the marks (the ground truth holds), and so do hotstack's lines. JFR before
        # JDK 25 reads a running interpreted leaf's bytecode pointer from its frame, which holds it
        # as of the method's last call out (here its entry: the line before the loop): the callers'
        # lines are compared there, the leaf's with the source only
        jfr_top = theirs.most_common(1)[0][0]
        if mode == "interpreted" and int(version) < 25:
            assert jfr_top[:2] == truth[:2], (version, mode, hot, theirs, truth)
        else:
            assert jfr_top == truth, (version, mode, hot, theirs, truth)
        assert ours.most_common(1)[0][0] == truth, (version, mode, hot, ours, truth)
        # a sample at the edge of the loop (the method's entry, its return) may show another line of
        # the same methods, or none: never most of them
        assert ours[truth] >= 0.9 * total, (version, mode, hot, ours, truth)
        lines_here = {n for key in ours for n in key if n}
        assert lines_here <= set(range(1, len(WORK.read_text().splitlines()) + 1)), ours


def test_jvm_without_a_line_field_is_said(classes, monkeypatch, caplog):  # noqa: F811
    """A JVM whose vmStructs lack a field that lines need (here ConstMethod::_code_size) keeps its
    named frames, without lines (never a wrong one), and is said: one warning with its pid, the
    runtime, its release and the field, and in what `hotstack doctor --pid` shows."""
    import io

    from hotstack import doctor
    from hotstack.runtimes.common.files import UNREAD

    drop_vmstructs_field(monkeypatch, "ConstMethod", "_code_size")
    proc = subprocess.Popen([str(jdk_bin("21") / "java"), "-cp", str(classes), "HotWork", "20", "2"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with caplog.at_level(logging.WARNING), \
                Engine(EngineConfig(frequency=499, pids=(proc.pid,), unwind="kernel")) as prof:
            samples = []
            for _ in range(3):
                time.sleep(1.0)
                samples.extend(prof.collect()[0].samples)
        said = UNREAD.of(proc.pid)
        report = io.StringIO()
        doctor.report_process(proc.pid, report)
    finally:
        proc.kill()
        proc.wait()
        UNREAD.forget(proc.pid)
    java = [f for s in samples for f in s.stack if f.kind is FrameKind.JAVA and f.name.startswith("HotWork.")]
    assert len(java) >= 100, len(java)
    assert {f.line for f in java} == {0}, collections.Counter(f.line for f in java)
    assert {f.file for f in java} == {"HotWork.java"}
    assert len(said) == 1 and said[0].partial == "lines", said
    assert said[0].runtime == "Java" and said[0].version.startswith("21"), said
    assert "ConstMethod::_code_size" in said[0].reason, said
    warnings = [r.getMessage() for r in caplog.records if "without lines" in r.getMessage()]
    assert len(warnings) == 1 and f"pid {proc.pid}" in warnings[0], warnings
    assert "read without lines: its vmStructs lack ConstMethod::_code_size" in report.getvalue(), report.getvalue()
    assert "runtime Java: read" in report.getvalue(), report.getvalue()
