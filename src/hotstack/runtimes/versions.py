"""The versions of each language runtime whose frames hotstack names: those tested on every change
and those read from their published layouts, untested. `hotstack run --help` and the README's
tables say the same words (tests/gadget/test_runtime_versions.py holds them to it). MATRIX, below,
is the runtime matrix's last recorded results (tests/runtimes/expected.json), written by its generator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeVersions:
    runtime: str       # as its users name it
    tested: str        # versions tested on every change
    untested: str      # versions read from their layouts (or other builds), not tested

    def summary(self) -> str:
        return f"{self.runtime} {self.tested} (tested; {self.untested}: untested)"


RUNTIME_VERSIONS = {
    "python": RuntimeVersions("CPython", "3.8–3.13", "3.14"),
    "node": RuntimeVersions("Node.js", "20 (V8 11.3)", "18, 22+"),
    "ruby": RuntimeVersions("Ruby", "3.1, 3.3", "2.7, 3.0, 3.2, 3.4"),
    "php": RuntimeVersions("PHP", "8.2, 8.4", "7.4–8.1, 8.3"),
    "java": RuntimeVersions("OpenJDK", "17", "other JDKs"),
    "perl": RuntimeVersions("Perl", "5.36, 5.40", "5.30–5.34, 5.38"),
}

# runtime-matrix: start (generated from tests/runtimes/expected.json by `python tests/runtimes/matrix.py --write-versions`)
# Per runtime, the versions of the runtime matrix (`make test-runtimes`) by their worst cell:
# passes (frames named, the 75/25 split within 5 points, stacks to the root), warns (said
# unread: a warning, the footer's count, doctor), fails.
MATRIX = {
    "python": {"passes": ("3.13",), "warns": (), "fails": ()},
    "node": {"passes": ("20",), "warns": (), "fails": ()},
    "ruby": {"passes": ("3.3",), "warns": (), "fails": ()},
    "php": {"passes": ("8.4",), "warns": (), "fails": ()},
    "perl": {"passes": ("5.40",), "warns": (), "fails": ()},
    "java": {"passes": ("21",), "warns": (), "fails": ()},
}
# runtime-matrix: end
