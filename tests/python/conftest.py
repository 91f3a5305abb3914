"""Interpreters for the Python-frame tests: every CPython 3.8+ on the machine.

pyenv interpreters (under $PYENV_ROOT or ~/.pyenv) and the distribution's /usr/bin/python3.
A version is skipped only when its interpreter is absent; /usr/bin/python3 is required in CI
(.ci/install.d/python.sh installs it).
"""

from __future__ import annotations

import pytest

from pyframes_helpers import INTERPRETERS, Target


def pytest_generate_tests(metafunc):
    if "python" in metafunc.fixturenames:
        if not INTERPRETERS:
            pytest.skip("no CPython 3.8+ interpreter on this machine")
        metafunc.parametrize("python", [p for _, p in INTERPRETERS], ids=[i for i, _ in INTERPRETERS])


@pytest.fixture
def target():
    started: list[Target] = []

    def start(python: str, script: str, *args: str) -> Target:
        t = Target(python, script, *args)
        started.append(t)
        return t

    yield start
    for t in started:
        t.stop()
