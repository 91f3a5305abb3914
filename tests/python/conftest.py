"""Interpreters for the Python-frame tests: every CPython 3.8+ on the machine.

pyenv interpreters (under $PYENV_ROOT or ~/.pyenv) and the distribution's /usr/bin/python3; for
the tests marked `debian_unstable`, also Debian unstable's python3.14 and python3.15 in its root.
A version is skipped only when its interpreter is absent; /usr/bin/python3 is required in CI
(.ci/install.d/python.sh installs it).
"""

from __future__ import annotations

import pytest

from pyframes_helpers import INTERPRETERS, Target, debian_unstable


def pytest_configure(config):
    config.addinivalue_line("markers", "debian_unstable: also with Debian unstable's interpreters, in its root "
                                       "(pyframes_helpers.debian_unstable)")


def pytest_generate_tests(metafunc):
    if "python" in metafunc.fixturenames:
        if not INTERPRETERS:
            pytest.skip("no CPython 3.8+ interpreter on this machine")
        found = INTERPRETERS
        if metafunc.definition.get_closest_marker("debian_unstable"):
            found = found + debian_unstable()
        metafunc.parametrize("python", [p for _, p in found], ids=[i for i, _ in found])


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
