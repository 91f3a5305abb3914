"""Test peers (compilers, perf, bpftool, collectors, Chromium, ...): a missing one is a failure.

`make test` installs every peer first (.ci/install-test-peers, the same scripts as CI), so a peer that
is still missing means the install step is broken: fail loudly with the command that installs it
instead of skipping, so that a developer's `make test` runs the same suite as CI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

INSTALL = "run `make test-peers` as root (.ci/install-test-peers)"


def require_tool(tool: str) -> str:
    """The path of a command on PATH; fails the test when it is missing."""
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: {INSTALL}", pytrace=False)
    return path


def require_file(path: Path | None, what: str) -> Path:
    """A peer at a known path (a cached build, a browser); fails the test when it is missing."""
    if path is None or not path.exists():
        pytest.fail(f"{what} is missing: {INSTALL}", pytrace=False)
    return path
