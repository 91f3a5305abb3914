"""pyroscope.ebpf's verbose_mode: the component's and the engine's debug lines (sessions, targets
matched, unwind tables built, pushes), as Alloy logs the embedded profiler's debug output with it.
The engine's loggers are shared by every pyroscope.ebpf component: debug while any of them asks."""

from __future__ import annotations

import logging

# the engine's loggers (each module's logger is a child of one of these)
ENGINE_LOGGERS = ("hotstack.sampling", "hotstack.unwind", "hotstack.procs", "hotstack.ebpf", "hotstack.obi",
                  "hotstack.export")
_VERBOSE: set[str] = set()     # ids of the components with verbose_mode = true


def set_verbose(component_id: str, logger: logging.Logger, on: bool) -> None:
    """Debug lines of this component (and of the engine while any component is verbose) on or off;
    off leaves them at the level --log.level gives."""
    if on:
        _VERBOSE.add(component_id)
    else:
        _VERBOSE.discard(component_id)
    logger.setLevel(logging.DEBUG if on else logging.NOTSET)
    for name in ENGINE_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if _VERBOSE else logging.NOTSET)
