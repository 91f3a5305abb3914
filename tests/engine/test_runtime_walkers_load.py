"""Every runtime's walker (its own program, or the native unwinder's step with the JIT hooks)
loads on this kernel: a program the verifier refuses turns that runtime's frames off with one
warning line, which no other test of a runtime that is absent here would notice."""

from __future__ import annotations

import pytest

from hotstack.sampling import Engine, EngineConfig

pytestmark = pytest.mark.root


def test_every_runtime_walker_is_accepted_by_the_verifier(caplog):
    with Engine(EngineConfig(frequency=49)) as engine:
        refused = [src.name for src in engine.runtimes if src._kernel is not None and not src._kernel.ready()]
    assert not refused, (refused, [r.getMessage()[:300] for r in caplog.records if "frames off" in r.getMessage()])
