"""The agent's HTTP server: /metrics, /-/ready, /-/healthy, a JSON and an HTML page per
component, and the flame graph page of the local store.

It listens where a DaemonSet exposes it to the pod network, so it is built for that. GET only
(other methods get 405), no route reads a file or changes state, secrets are shown as
`(secret)` (component.py), a slow or idle client is dropped after SOCKET_TIMEOUT_S, at most
MAX_CONNECTIONS are served at once (more are closed at once), query values are bounded, and
every answer says not to sniff, frame or load anything from elsewhere."""

from __future__ import annotations

import html
import ipaddress
import json
import logging
import math
import os
import selectors
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..errors import ConfigError
from . import flame_page as flamegraph
from .controller import Controller

log = logging.getLogger("hotstack.agent.http")

DEFAULT_LISTEN = "127.0.0.1:12345"
SOCKET_TIMEOUT_S = 30
MAX_CONNECTIONS = 64
MAX_QUERY_VALUE = 256
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    # the pages' scripts and styles are inline; nothing is loaded from anywhere else
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
}


def parse_listen(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--server.http.listen-addr {addr!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]") or "0.0.0.0", int(port)


_STYLE = ("<style>body{font:14px sans-serif;margin:16px} td,th{padding:4px 10px;text-align:left;"
          "border-bottom:1px solid #ddd} .healthy{color:#1a7f37} .unhealthy{color:#cf222e} "
          "pre{background:#f6f8fa;padding:8px;overflow:auto}</style>")


def _is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1, and 127.x seen through a dual-stack socket (::ffff:127.x)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


class AgentServer:
    def __init__(self, controller: Controller, listen: str, reload=None) -> None:
        """`reload()` -> (ok, message): what /-/reload does (re-read and apply the config)."""
        self.controller = controller
        self.ready = False
        self._reload = reload
        host, port = parse_listen(listen)
        agent = self

        class Handler(BaseHTTPRequestHandler):
            timeout = SOCKET_TIMEOUT_S   # a client that sends nothing does not hold a thread

            def log_message(self, *args) -> None:   # quiet: the agent logs what matters
                pass

            def do_GET(self) -> None:
                agent.handle(self)

            def do_POST(self) -> None:
                # Only /-/reload takes a POST (as Alloy's); its body, if any, is not read.
                if urllib.parse.urlsplit(self.path).path == "/-/reload":
                    agent.handle(self)
                else:
                    agent.not_allowed(self)

            def _not_allowed(self) -> None:
                agent.not_allowed(self)

            do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_CONNECT = do_TRACE = _not_allowed

        try:
            self.httpd = _BoundedServer((host, port), Handler)
        except OSError as e:
            raise ConfigError(f"cannot listen on {listen}: {e.strerror} (use --server.http.listen-addr)") from None
        self.httpd.daemon_threads = True
        self.address = f"{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="hotstack-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def not_allowed(self, req: BaseHTTPRequestHandler) -> None:
        req.send_response(405)
        req.send_header("Allow", "GET")
        req.send_header("Content-Length", "0")
        for k, v in _SECURITY_HEADERS.items():
            req.send_header(k, v)
        req.end_headers()

    # -- routes -------------------------------------------------------------------------------
    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(req.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        path = url.path
        if path == "/-/reload":
            # As Alloy: reload the config file; 200 when applied, 400 with the error otherwise.
            if self._reload is None:
                return self._text(req, 404, "reload is not available\n")
            if not _is_loopback(req.client_address[0]):
                # the one route that acts: not for the pod network (Alloy serves it to anyone)
                req.close_connection = True
                return self._text(req, 403, "/-/reload is served to local clients only (127.0.0.1, ::1); "
                                            "send SIGHUP, or call it from the host or the pod itself\n")
            ok, message = self._reload()
            req.close_connection = True     # a POST body we did not read must not be taken as a request
            return self._text(req, 200 if ok else 400, message + "\n")
        if path == "/metrics":
            registry = self.controller.metrics_registry
            return self._send(req, 200, generate_latest(registry), CONTENT_TYPE_LATEST)
        if path == "/-/ready":
            return self._text(req, 200 if self.ready else 503, "Agent is ready.\n" if self.ready
                              else "Agent is not ready.\n")
        if path == "/-/healthy":
            bad = [c for c in self.controller.components() if c.health.state == "unhealthy"]
            if not bad:
                return self._text(req, 200, "All components are healthy.\n")
            return self._text(req, 500, "unhealthy components: " + ", ".join(
                f"{c.id}: {c.health.message}" for c in bad) + "\n")
        if path == "/api/v0/web/components":
            return self._json(req, 200, [_summary(c) for c in self.controller.components()])
        if path.startswith("/api/v0/web/components/"):
            comp = self.controller.component(path.rsplit("/", 1)[1])
            if comp is None:
                return self._json(req, 404, {"error": "no such component"})
            return self._json(req, 200, comp.describe())
        if path.startswith("/component/"):
            comp = self.controller.component(path.split("/", 2)[2])
            if comp is None:
                return self._text(req, 404, "no such component\n")
            return self._html(req, 200, _component_page(comp.describe()))
        if path == "/flamegraph":
            return self._flamegraph(req, query)
        if path == "/":
            return self._html(req, 200, self._index())
        return self._text(req, 404, "not found\n")

    def _flamegraph(self, req, query: dict) -> None:
        store = self.controller.services.get("local_store")
        if store is None:
            return self._text(req, 404, "no local store in this pipeline (add hotstack.local_store)\n")
        try:
            minutes = float(query.get("minutes", "15"))
        except ValueError:
            minutes = math.nan
        if not (0 < minutes <= 7 * 24 * 60):
            return self._text(req, 400, "minutes must be a number of minutes between 0 and 10080\n")
        service = query.get("service_name", "")
        if len(service) > MAX_QUERY_VALUE:
            return self._text(req, 400, f"service_name is longer than {MAX_QUERY_VALUE} characters\n")
        if query.get("format") == "json":
            return self._json(req, 200, flamegraph.tree(store.slices(service, minutes)))
        title = f"hotstack: {service or 'all services'}, last {minutes:g} min"
        self._html(req, 200, flamegraph.page(title, store.slices(service, minutes), store.services(), service,
                                             minutes))

    def _index(self) -> str:
        rows = "".join(
            f'<tr><td><a href="/component/{html.escape(c.id)}">{html.escape(c.id)}</a></td>'
            f'<td class="{c.health.state}">{c.health.state}</td><td>{html.escape(c.health.message)}</td></tr>'
            for c in self.controller.components())
        flame = '<p><a href="/flamegraph">flame graph</a></p>' if "local_store" in self.controller.services else ""
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>hotstack agent</title>{_STYLE}</head>"
                f"<body><h1>hotstack agent</h1>{flame}<table><tr><th>component</th><th>health</th><th>message</th>"
                f"</tr>{rows}</table><p><a href='/metrics'>metrics</a></p></body></html>")

    # -- responses ----------------------------------------------------------------------------
    @staticmethod
    def _send(req, status: int, body: bytes, content_type: str) -> None:
        req.send_response(status)
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(len(body)))
        for k, v in _SECURITY_HEADERS.items():
            req.send_header(k, v)
        req.end_headers()
        req.wfile.write(body)

    def _text(self, req, status: int, text: str) -> None:
        self._send(req, status, text.encode(), "text/plain; charset=utf-8")

    def _json(self, req, status: int, obj: object) -> None:
        self._send(req, status, json.dumps(obj, indent=1).encode(), "application/json")

    def _html(self, req, status: int, text: str) -> None:
        self._send(req, status, text.encode(), "text/html; charset=utf-8")


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS at once: more are closed unanswered
    rather than queued without bound. Its loop sleeps until a connection comes or shutdown()
    wakes it (socketserver's polls every 0.5 s: some 2% of an idle agent's CPU)."""
    daemon_threads = True

    def __init__(self, *args, **kwargs) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stopping = False
        self._stopped = threading.Event()
        self._stopped.set()         # until serve_forever runs: shutdown() then has nothing to wait for
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            self._close_wake()
            raise

    def serve_forever(self, poll_interval: float | None = None) -> None:   # noqa: ARG002 - no polling
        self._stopped.clear()
        try:
            with selectors.PollSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._wake_r, selectors.EVENT_READ)
                while not self._stopping:
                    for key, _events in selector.select():
                        if key.fileobj is self and not self._stopping:
                            self._handle_request_noblock()
                    self.service_actions()
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serve_forever and wait for it to end (from another thread, as socketserver's)."""
        self._stopping = True
        try:
            os.write(self._wake_w, b"\0")
        except OSError:         # closed already
            pass
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        self._close_wake()

    def _close_wake(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        """A client that reset or closed its connection before its answer (a scraper's timeout, a
        slowloris) is one debug line; anything else is the server's own fault, logged with its
        traceback. socketserver's own printed ~20 lines on stderr for each."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            log.debug("HTTP client %s went away: %s", client_address[0], error.strerror or type(error).__name__)
        else:
            log.error("HTTP request from %s failed", client_address[0], exc_info=True)


def _summary(c) -> dict:
    return {"id": c.id, "name": c.name, "label": c.label, "health": c.health.as_dict()}


def _component_page(d: dict) -> str:
    def section(title: str, value: object) -> str:
        return f"<h2>{title}</h2><pre>{html.escape(json.dumps(value, indent=2))}</pre>"
    h = d["health"]
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(d['id'])}</title>{_STYLE}"
            f"</head><body><p><a href='/'>all components</a></p><h1>{html.escape(d['id'])}</h1>"
            f"<p>health: <b class='{h['state']}'>{h['state']}</b> {html.escape(h['message'])}"
            f" <small>{h['updated']}</small></p>"
            + section("Arguments", d["arguments"]) + section("Exports", d["exports"])
            + section("Debug info", d["debug_info"]) + "</body></html>")
