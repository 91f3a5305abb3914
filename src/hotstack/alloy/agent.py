"""Run a pipeline: load the config, start the components and the HTTP server, wait, stop."""

from __future__ import annotations

import logging
import signal
import threading
import time

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics

from .. import interrupted_while_starting
from ..errors import ConfigError
from ..export.delivery import FLUSH_DEADLINE_S
from .controller import Controller, load_config
from .server import AgentServer

log = logging.getLogger("hotstack.agent")


class Agent:
    def __init__(self, text: str, filename: str, listen: str,
                 read_config: Callable[[], str] | None = None) -> None:
        """`read_config()` reads the config again for a reload (SIGHUP, /-/reload)."""
        disable_created_metrics()   # *_created series only double the scrape size
        self.registry = CollectorRegistry()
        self.filename = filename
        self._read_config = read_config or (lambda: text)
        self.controller: Controller = load_config(text, filename, self.registry)
        self.server = AgentServer(self.controller, listen, reload=self.reload)
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._reload_requested = False
        self._reload_lock = threading.Lock()
        # Alloy's metrics of config loads, under Alloy's names (dashboards read them).
        self._load_ok = Gauge("alloy_config_last_load_successful",
                              "Whether the last configuration load was successful.", registry=self.registry)
        self._load_failures = Counter("alloy_config_load_failures",
                                      "Configuration loads that failed.", registry=self.registry)
        self._load_time = Gauge("alloy_config_last_load_success_timestamp_seconds",
                                "When the configuration was last loaded successfully.", registry=self.registry)
        self._load_ok.set(1)
        self._load_time.set_to_current_time()

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

    def reload(self) -> tuple[bool, str]:
        """Read the config again and apply it; on any error keep the running graph. Returns
        (ok, message) for /-/reload."""
        with self._reload_lock:
            try:
                summary = self.controller.reload(self._read_config(), self.filename)
            except ConfigError as e:
                self._load_ok.set(0)
                self._load_failures.inc()
                message = str(e).replace("\n", "; ")
                log.error("config reload failed, the running pipeline is unchanged: %s", message)
                return False, message
            self._load_ok.set(1)
            self._load_time.set_to_current_time()
            parts = [f"{k}: {', '.join(v)}" for k, v in summary.items() if v and k != "kept"]
            message = f"config reloaded from {self.filename} ({len(self.controller.order)} components" + (
                "; " + "; ".join(parts) if parts else "; no component added or removed") + ")"
            log.info("%s", message)
            return True, message

    def run(self, duration_s: float = 0) -> None:
        def on_stop(signum, frame) -> None:
            self.stopping.set()
            self._wake.set()

        def on_hangup(signum, frame) -> None:
            # Alloy reloads its config on SIGHUP; the reload runs on the main loop, not in the handler.
            self._reload_requested = True
            self._wake.set()

        previous = {s: signal.signal(s, on_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
        if interrupted_while_starting():
            self.stopping.set()
        try:
            self.start()
            deadline = time.monotonic() + duration_s if duration_s > 0 else None
            while not self.stopping.is_set():
                self._wake.wait(0.5)
                self._wake.clear()
                if self._reload_requested and not self.stopping.is_set():
                    self._reload_requested = False
                    log.info("SIGHUP: reloading %s", self.filename)
                    self.reload()
                if deadline is not None and time.monotonic() >= deadline:
                    break
            self.stop()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
