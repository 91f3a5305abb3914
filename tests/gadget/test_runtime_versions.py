"""The runtime versions `hotstack run --help` claims are the README's, from one table in the code
(runtimes/versions.py): each runtime's flag help, its row of the README's flag table and of its
status table say the same tested and untested versions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hotstack.runtimes.versions import RUNTIME_VERSIONS

from ..conftest import hotstack

README = (Path(__file__).parents[2] / "README.md").read_text()


@pytest.fixture(scope="module")
def run_help() -> str:
    r = hotstack("run", "--help")
    assert r.returncode == 0, r.stderr
    return " ".join(r.stdout.split())


def _flag_help(text: str, flag: str) -> str:
    """The help of `--flag, --no-flag` up to the next flag."""
    start = text.index(f"--{flag}, --no-{flag} ")
    following = re.search(r" --[a-z-]+(, | [A-Z])", text[start + 20:])
    return text[start:start + 20 + (following.start() if following else len(text))]


@pytest.mark.parametrize("flag", list(RUNTIME_VERSIONS))
def test_help_and_readme_claim_the_same_versions(run_help, flag):
    summary = RUNTIME_VERSIONS[flag].summary()
    assert summary in _flag_help(run_help, flag), (summary, _flag_help(run_help, flag))
    rows = [line for line in README.splitlines() if line.startswith(f"| `--{flag}`, `--no-{flag}` |")]
    assert len(rows) == 1 and summary in rows[0], (summary, rows)
    status = [line for line in README.splitlines() if line.startswith("| ") and " frames: " in line.split("|")[1]
              and summary in line]
    assert len(status) == 1, (summary, "no status row of the README with these versions")
