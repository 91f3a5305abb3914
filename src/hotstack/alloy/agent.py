"""Run a pipeline: load the config, start the components and the HTTP server, wait, stop."""

from __future__ import annotations

import logging
import signal
import threading
import time

from prometheus_client import CollectorRegistry, disable_created_metrics

from ..errors import ConfigError
from ..export.delivery import FLUSH_DEADLINE_S
from .controller import Controller, load_config
from .server import AgentServer

log = logging.getLogger("hotstack.agent")


class Agent:
    def __init__(self, text: str, filename: str, listen: str) -> None:
        disable_created_metrics()   # *_created series only double the scrape size
        self.registry = CollectorRegistry()
        self.controller: Controller = load_config(text, filename, self.registry)
        self.server = AgentServer(self.controller, listen)
        self.stopping = threading.Event()

    def start(self) -> None:
        self.server.start()
        try:
            self.controller.start()
        except ConfigError:
            self.controller.stop()
            self.server.stop()
            raise
        self.server.ready = True
        log.info("agent running; http://%s/ (components, /metrics)", self.server.address)

    def stop(self) -> None:
        started = time.monotonic()
        self.server.ready = False
        self.controller.stop(FLUSH_DEADLINE_S)
        self.server.stop()
        log.debug("agent stopped in %.2fs", time.monotonic() - started)

    def run(self, duration_s: float = 0) -> None:
        def on_signal(signum, frame) -> None:
            self.stopping.set()
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            deadline = time.monotonic() + duration_s if duration_s > 0 else None
            while not self.stopping.wait(0.5):
                if deadline is not None and time.monotonic() >= deadline:
                    break
            self.stop()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
