"""The base of every component, their registry, and component health."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .schema import Schema
from .secret import Secret, redact_url, shown

if TYPE_CHECKING:
    from .controller import Controller

REGISTRY: dict[str, type["Component"]] = {}

# Alloy components people meet in pyroscope configs that hotstack does not implement: named in
# the error so that the user knows it is a hotstack limit, not a typo.
NOT_IMPLEMENTED_PREFIXES = ("beyla.", "otelcol.", "prometheus.", "loki.", "pyroscope.java", "pyroscope.scrape",
                            "pyroscope.receive_http", "discovery.", "local.file", "remote.", "import.", "mimir.",
                            "faro.", "database_observability.", "declare", "otel")


def register(cls: type["Component"]) -> type["Component"]:
    REGISTRY[cls.name] = cls
    return cls


@dataclass
class Health:
    state: str = "unknown"      # healthy | unhealthy | unknown | exited
    message: str = ""
    updated: float = 0.0

    def as_dict(self) -> dict:
        return {"state": self.state, "message": self.message,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.updated)) if self.updated else ""}


class Component:
    """One configured block of the pipeline.

    `update(args)` is called with decoded arguments each time the block is evaluated;
    `start()` begins background work; exports are published with `self.publish(...)`,
    which re-evaluates the components that read them.
    """

    name: ClassVar[str] = ""
    schema: ClassVar[Schema]
    # Exports before the component has run (also what --validate evaluates dependents with).
    initial_exports: ClassVar[dict] = {}

    def __init__(self, controller: "Controller", label: str) -> None:
        self.controller = controller
        self.label = label
        self.id = f"{self.name}.{label}"
        self.args: dict = {}
        self.exports: dict = dict(self.initial_exports)
        self.health = Health()
        self.eval_error = ""     # set while the last re-evaluation failed
        self.log = logging.getLogger(f"hotstack.agent.{self.id}")
        self._lock = threading.RLock()

    # -- lifecycle ----------------------------------------------------------------------------
    def update(self, args: dict) -> None:
        """Apply new arguments. Raise ConfigError (or ValueError) when they are invalid."""
        self.args = args

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    # -- helpers for subclasses ------------------------------------------------------------------
    def publish(self, **exports: object) -> None:
        changed = any(self.exports.get(k) != v for k, v in exports.items())
        self.exports.update(exports)
        if changed:
            self.controller.exports_changed(self)

    def set_health(self, state: str, message: str = "") -> None:
        message = redact_url(message)   # an error may name a URL with its password
        if state != self.health.state or message != self.health.message:
            if state == "unhealthy":
                self.log.error("%s: unhealthy: %s", self.id, message)
        self.health = Health(state, message, time.time())

    def debug_info(self) -> dict:
        return {}

    def describe(self) -> dict:
        """Everything the component page shows."""
        return {"id": self.id, "name": self.name, "label": self.label, "health": self.health.as_dict(),
                "arguments": _jsonable({k: v for k, v in self.args.items() if not k.startswith("_")}), "exports": _jsonable(self.exports),
                "debug_info": _jsonable(self.debug_info())}


def _jsonable(value: object) -> object:
    if isinstance(value, (Secret, str)):   # every page and API answer is built from this
        return shown(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{getattr(value, 'capsule_type', type(value).__name__)}>"
