"""pyroscope.ebpf's verbose_mode: the component's and the engine's debug lines (sessions, targets
matched, unwind tables built, pushes), as Alloy logs the embedded profiler's debug output with it.
The engine's loggers are shared by every pyroscope.ebpf component: debug while any of them asks."""

from __future__ import annotations

import logging
import weakref

# the engine's loggers (each module's logger is a child of one of these)
ENGINE_LOGGERS = ("hotstack.sampling", "hotstack.unwind", "hotstack.procs", "hotstack.ebpf", "hotstack.obi",
                  "hotstack.export")
# the components with verbose_mode = true (by instance: a reload's new component of the same id
# may be configured before the old one stops)
_VERBOSE: "weakref.WeakSet[object]" = weakref.WeakSet()


def set_verbose(component: object, logger: logging.Logger, on: bool) -> None:
    """Debug lines of this component (and of the engine while any component is verbose) on or off;
    off leaves them at the level --log.level gives."""
    if on:
        _VERBOSE.add(component)
    else:
        _VERBOSE.discard(component)
    logger.setLevel(logging.DEBUG if on else logging.NOTSET)
    _set_engine_level()


def forget(component: object) -> None:
    """A component stopped: the engine's debug lines stay on only for the others that ask."""
    _VERBOSE.discard(component)
    _set_engine_level()


def _set_engine_level() -> None:
    for name in ENGINE_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if len(_VERBOSE) else logging.NOTSET)
