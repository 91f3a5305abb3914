"""Ruby-frame tests: the distribution's ruby (.ci/install.d/interpreters.sh installs it)."""

from __future__ import annotations

import pytest

from rb_helpers import RubyTarget


@pytest.fixture
def ruby_target():
    started: list[RubyTarget] = []

    def start(ruby: str, script, *args: str, flags: tuple[str, ...] = ()) -> RubyTarget:
        t = RubyTarget(ruby, script, *args, flags=flags)
        started.append(t)
        return t

    yield start
    for t in started:
        t.stop()
