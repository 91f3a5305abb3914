"""The versions of each language runtime whose frames hotstack names: those tested on every change
and those read from their published layouts, untested. `hotstack run --help` and the README's
tables say the same words (tests/gadget/test_runtime_versions.py holds them to it).

Tested means a test runs that version on every change and it passes: the suite's own tests
(OTHER_TESTED) or the runtime matrix's cells (MATRIX: written from tests/runtimes/expected.json by
`python tests/runtimes/matrix.py --write-versions`, which also rewrites the README's rows). A
version the matrix runs and that does not pass there is never claimed tested."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeVersions:
    runtime: str       # as its users name it
    tested: str        # versions tested on every change
    untested: str      # versions read from their layouts (or other builds), not tested

    def summary(self) -> str:
        if not self.untested:
            return f"{self.runtime} {self.tested} (tested)"
        return f"{self.runtime} {self.tested} (tested; {self.untested}: untested)"


NAMES = {"python": "CPython", "node": "Node.js", "ruby": "Ruby", "php": "PHP", "java": "OpenJDK", "perl": "Perl"}
# Versions the suite's other tests run on every change (this machine's interpreters, pyenv's CPythons).
OTHER_TESTED = {
    "python": ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13"),
    "node": ("20",),
    "ruby": ("3.1", "3.3"),
    "php": ("8.2", "8.4"),
    "java": ("17",),
    "perl": ("5.36", "5.40"),
}
# Versions read from their published layouts (or other builds); untested unless a test runs them.
LAYOUTS = {
    "python": ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15"),
    "node": ("18", "20", "22", "24"),
    "ruby": ("2.7", "3.0", "3.1", "3.2", "3.3", "3.4"),
    "php": ("7.4", "8.0", "8.1", "8.2", "8.3", "8.4", "8.5"),
    "java": ("17", "other JDKs"),
    "perl": ("5.30", "5.32", "5.34", "5.36", "5.38", "5.40", "5.42", "5.44"),
}

# runtime-matrix: start (generated from tests/runtimes/expected.json by `python tests/runtimes/matrix.py --write-versions`)
# Per runtime, the versions of the runtime matrix (`make test-runtimes`) by their worst cell:
# passes (frames named, the 75/25 split within 5 points, stacks to the root), warns (said
# unread: a warning, the footer's count, doctor), fails.
MATRIX = {
    "python": {"passes": ("3.9", "3.11", "3.13", "3.14", "3.15"), "warns": (), "fails": ()},
    "node": {"passes": ("12", "18", "20", "24", "22"), "warns": (), "fails": ()},
    "ruby": {"passes": ("2.7", "3.1", "3.3", "3.4"), "warns": (), "fails": ()},
    "php": {"passes": ("7.4", "8.2", "8.4", "8.5"), "warns": (), "fails": ()},
    "php-fpm": {"passes": ("7.4", "8.2", "8.4", "8.5"), "warns": (), "fails": ()},
    "perl": {"passes": ("5.32", "5.36", "5.40", "5.42", "5.44"), "warns": (), "fails": ()},
    "java": {"passes": ("11", "17", "21", "27", "25"), "warns": ("8",), "fails": ()},
}
# runtime-matrix: end


def _key(version: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", version)) or (1 << 30,)


def _spans(versions: list[str], known: list[str]) -> str:
    """"3.8–3.13" for three or more versions next to each other among the known ones, else a list."""
    parts, run = [], []
    for v in versions:
        if run and (v not in known or known.index(v) != known.index(run[-1]) + 1):
            parts.append(run)
            run = []
        run.append(v)
    if run:
        parts.append(run)
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) >= 3 else ", ".join(r) for r in parts)


def versions_of(runtime: str) -> RuntimeVersions:
    """Tested: the suite's other tests' versions and the matrix's passing ones, less any the matrix
    has warn or fail (those are in the README's matrix table, not claimed either way here)."""
    failing = set(MATRIX[runtime]["warns"]) | set(MATRIX[runtime]["fails"])
    tested = (set(OTHER_TESTED[runtime]) - failing) | set(MATRIX[runtime]["passes"])
    known = sorted(tested | set(LAYOUTS[runtime]) | failing, key=_key)
    untested = [v for v in known if v in LAYOUTS[runtime] and v not in tested | failing]
    if runtime == "node":       # its releases are every other number: a span would claim the odd ones
        known = []
    return RuntimeVersions(NAMES[runtime], _spans(sorted(tested, key=_key), known),
                           _spans(untested, known))


RUNTIME_VERSIONS = {runtime: versions_of(runtime) for runtime in NAMES}
