"""verbose_mode's loggers: the engine's at DEBUG while any pyroscope.ebpf component asks, back to
--log.level's when none does (a component turned off, or stopped by a reload that removed it,
even after a new component of the same id was configured)."""

from __future__ import annotations

import logging

from hotstack.alloy.components import verbose


class _Component:
    pass


def test_engine_debug_while_any_component_asks():
    engine = logging.getLogger("hotstack.sampling")
    old, new, other = _Component(), _Component(), _Component()
    log = logging.getLogger("hotstack.agent.pyroscope.ebpf.test")
    try:
        verbose.set_verbose(old, log, True)
        assert engine.level == logging.DEBUG and log.level == logging.DEBUG
        verbose.set_verbose(new, log, True)       # a reload's new component, configured first
        verbose.forget(old)                       # then the old one stops
        assert engine.level == logging.DEBUG and log.level == logging.DEBUG
        verbose.set_verbose(other, logging.getLogger("hotstack.agent.x"), False)
        assert engine.level == logging.DEBUG
        verbose.set_verbose(new, log, False)
        assert engine.level == logging.NOTSET and log.level == logging.NOTSET
    finally:
        for c in (old, new, other):
            verbose.forget(c)
