"""Pyroscope push client: what Grafana Alloy's `pyroscope.write` sends, over the Connect protocol.

`POST {url}/push.v1.PusherService/Push`, Connect unary (`Content-Type: application/proto`, an
uncompressed PushRequest as the body), on httpx: HTTP/2 where an https:// server offers it,
else HTTP/1.1. Each `push()` becomes one PushRequest; it is queued, never
sent on the caller's thread (see delivery.py), and retried with exponential backoff on timeouts,
connection errors, 5xx, 408 and (when enabled) 429.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import ssl
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from .. import __version__
from ..errors import ConfigError
from .delivery import (DEFAULT_QUEUE_BYTES, FLUSH_DEADLINE_S, Backoff, DeliveryMetrics, DeliveryQueue,
                       PartlySent, PermanentError, RetryableError, printable, redact_url)
from .http_transport import Transport, describe
from .push_pb2 import LabelPair, PushRequest, RawProfileSeries, RawSample

PUSH_PATH = "/push.v1.PusherService/Push"
# One interval's profiles go to the receiver together (push_many): at most this many series and
# bytes of profiles in one PushRequest
BATCH_SERIES = 64
BATCH_BYTES = 2 << 20
# Connect-Timeout-Ms is at most 10 digits: a longer remote_timeout cannot be sent (and overflows
# the clocks it is added to).
MAX_REMOTE_TIMEOUT_S = 9_999_999.999
MAX_ANSWER = 1 << 20   # of a push answer (an empty PushResponse or a Connect error) read at most

log = logging.getLogger("hotstack.export.pyroscope")


@dataclass
class PyroscopeEndpoint:
    """One `endpoint` block of `pyroscope.write`, argument names in snake_case."""

    url: str
    name: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    basic_auth_username: str = ""
    basic_auth_password: str = ""
    basic_auth_password_file: str = ""
    bearer_token: str = ""
    bearer_token_file: str = ""
    remote_timeout_s: float = 10.0
    min_backoff_s: float = 0.5
    max_backoff_s: float = 300.0
    max_backoff_retries: int = 10
    retry_on_http_429: bool = True
    tls_ca_file: str = ""
    # A front door with its own HTTP client settings (proxy, TLS client certificates, oauth2...)
    # gives both: `transport(timeout)` -> a new Transport for the endpoint, and `client_headers()`
    # -> headers read at each request (credentials, a token).
    transport: Callable[[float], Transport] | None = None
    transport_key: Callable[[], object] | None = None   # when its value changes, the transport is made again
    client_headers: Callable[[], dict[str, str]] | None = None
    follow_redirects: bool = True
    enable_http2: bool = True     # offered over TLS (ALPN), as Go's client; plain http:// is HTTP/1.1
    server_name: str = ""         # the TLS name sent and checked (tls_config.server_name)
    # Trace context propagators (Alloy's `tracing` block): which headers carry the push's trace.
    jaeger_propagator: bool = False
    trace_context_propagator: bool = False

    def validate(self) -> None:
        try:
            parts = urlsplit(self.url)
        except ValueError as e:    # e.g. an unclosed IPv6 bracket
            raise ConfigError(f"pyroscope endpoint url {self.shown_url!r}: {e}") from None
        try:
            port = parts.port      # ValueError when it is not a number in 0..65535
        except ValueError:
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"pyroscope endpoint url {self.shown_url!r}: expected http(s)://host[:port][/path]")
        if port is not None and not 0 < port < 65536:
            raise ConfigError(f"pyroscope endpoint url {self.shown_url!r}: the port must be a number in 1..65535")
        if self.bearer_token and self.bearer_token_file:
            raise ConfigError("pyroscope endpoint: at most one of bearer_token and bearer_token_file")
        if (self.bearer_token or self.bearer_token_file) and self.basic_auth_username:
            raise ConfigError("pyroscope endpoint: at most one authentication method (basic_auth or bearer token)")
        if self.remote_timeout_s <= 0:
            raise ConfigError("pyroscope endpoint: remote_timeout must be positive")
        if self.remote_timeout_s > MAX_REMOTE_TIMEOUT_S:
            raise ConfigError(f"pyroscope endpoint: remote_timeout {self.remote_timeout_s:.0f}s is longer than the "
                              f"Connect protocol's limit ({MAX_REMOTE_TIMEOUT_S / 86400:.0f} days: "
                              f"Connect-Timeout-Ms has at most 10 digits)")
        if self.min_backoff_s <= 0 or self.max_backoff_s < self.min_backoff_s:
            raise ConfigError("pyroscope endpoint: need 0 < min_backoff_period <= max_backoff_period")
        if self.max_backoff_retries < 0:
            raise ConfigError("pyroscope endpoint: max_backoff_retries must be >= 0 (0 = retry forever)")

    @property
    def display_name(self) -> str:
        return self.name or redact_url(self.url)

    @property
    def shown_url(self) -> str:
        """The URL as logs and errors show it: a password in it hidden."""
        return redact_url(self.url)

    def auth_header(self) -> str | None:
        """Read files at each request, as Alloy does, so rotated tokens are picked up."""
        if self.bearer_token or self.bearer_token_file:
            token = self.bearer_token or _read_secret(self.bearer_token_file)
            return f"Bearer {token}"
        if self.basic_auth_username:
            password = self.basic_auth_password or (
                _read_secret(self.basic_auth_password_file) if self.basic_auth_password_file else "")
            creds = base64.b64encode(f"{self.basic_auth_username}:{password}".encode()).decode()
            return f"Basic {creds}"
        return None


def _read_secret(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        raise RetryableError(f"cannot read {path}: {e.strerror}") from None


@dataclass(frozen=True)
class PushSeries:
    """One profile of one series: its labels (`__name__`, `service_name`, ...) and a pprof (gzipped or not)."""

    labels: dict[str, str]
    raw_profile: bytes


# Pyroscope's own limits (validation defaults of the distributor).
MAX_LABEL_NAME_LENGTH = 1024
MAX_LABEL_VALUE_LENGTH = 2048
MAX_LABEL_NAMES_PER_SERIES = 30
_LABEL_NAME = re.compile(r"[a-zA-Z0-9_.]+\Z")
_KEPT_RESERVED = ("__name__", "__delta__")


def series_labels(labels: dict[str, str]) -> list[tuple[str, str]]:
    """Labels as they go on the wire: `__`-prefixed ones removed except `__name__` and `__delta__`,
    sorted by name (as `pyroscope.write` does)."""
    return sorted((k, v) for k, v in labels.items() if not k.startswith("__") or k in _KEPT_RESERVED)


def validate_labels(labels: list[tuple[str, str]]) -> str | None:
    """Why Pyroscope would refuse this series, or None."""
    if not labels:
        return "no labels"
    names = [k for k, _ in labels]
    if len(set(names)) != len(names):
        return "duplicate label names"
    if len(labels) > MAX_LABEL_NAMES_PER_SERIES:
        return f"{len(labels)} labels (at most {MAX_LABEL_NAMES_PER_SERIES})"
    for name, value in labels:
        if not _LABEL_NAME.match(name):
            return f"invalid label name {name!r} (allowed: letters, digits, '_' and '.')"
        if len(name) > MAX_LABEL_NAME_LENGTH:
            return f"label name {name[:40]!r}... longer than {MAX_LABEL_NAME_LENGTH}"
        if len(value) > MAX_LABEL_VALUE_LENGTH:
            return f"label {name!r}: value longer than {MAX_LABEL_VALUE_LENGTH}"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"label {name!r}: value is not valid UTF-8"
    labels_dict = dict(labels)
    if not labels_dict.get("service_name"):
        return "missing service_name label"
    if not labels_dict.get("__name__"):
        return "missing __name__ label (the profile type, e.g. process_cpu)"
    return None


def encode_push_request(series: list[tuple[list[tuple[str, str]], bytes]]) -> bytes:
    return PushRequest(series=[
        RawProfileSeries(labels=[LabelPair(name=k, value=v) for k, v in labels],
                         samples=[RawSample(raw_profile=raw, ID=str(uuid.uuid4()))])
        for labels, raw in series
    ]).SerializeToString()


def trace_headers(endpoint: PyroscopeEndpoint, trace_id: str) -> dict[str, str]:
    """What Alloy's propagators put on a push: the push's trace and a new span per attempt, in
    W3C `traceparent` and Jaeger `uber-trace-id` form. Not sampled: hotstack records no spans."""
    if not (endpoint.jaeger_propagator or endpoint.trace_context_propagator):
        return {}
    span_id = os.urandom(8).hex()
    out = {}
    if endpoint.trace_context_propagator:
        out["traceparent"] = f"00-{trace_id}-{span_id}-00"
    if endpoint.jaeger_propagator:
        out["uber-trace-id"] = f"{trace_id}:{span_id}:0:0"
    return out


class _ConnectClient:
    """The endpoint's HTTP client (httpx, one pooled keep-alive connection), used by the delivery
    thread only; abort() from another thread."""

    def __init__(self, endpoint: PyroscopeEndpoint) -> None:
        self.endpoint = endpoint
        self.url = endpoint.url.rstrip("/") + PUSH_PATH
        self._transport: Transport | None = None
        self._key: object = None

    def _client(self) -> Transport:
        ep = self.endpoint
        key = ep.transport_key() if ep.transport_key is not None else None
        if self._transport is not None and key != self._key:   # e.g. a rotated client certificate
            self.close()
        self._key = key
        if self._transport is None:
            if ep.transport is not None:
                self._transport = ep.transport(ep.remote_timeout_s)
            else:
                self._transport = Transport(
                    timeout=ep.remote_timeout_s, verify=ssl.create_default_context(cafile=ep.tls_ca_file or None),
                    http2=ep.enable_http2, follow_redirects=ep.follow_redirects)
        return self._transport

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def abort(self) -> None:
        """From another thread: end a request in flight at once (a hanging receiver would hold
        it until remote_timeout); the delivery thread then sees the attempt fail."""
        transport = self._transport
        if transport is not None:
            transport.abort()

    def _headers(self, trace_id: str) -> dict[str, str]:
        ep = self.endpoint
        headers = {
            "Content-Type": "application/proto",
            "Connect-Protocol-Version": "1",
            "Connect-Timeout-Ms": str(int(ep.remote_timeout_s * 1000)),
            "User-Agent": f"hotstack/{__version__}",
        }
        if ep.client_headers is not None:
            try:
                headers.update(ep.client_headers())
            except Exception as e:   # a credentials file gone, a token server down: try again later
                raise RetryableError(f"POST {ep.shown_url}{PUSH_PATH}: {printable(e)}") from None
        headers.update(ep.headers)
        auth = ep.auth_header()
        if auth:
            headers["Authorization"] = auth
        headers.update(trace_headers(ep, trace_id))
        return headers

    def post(self, body: bytes, trace_id: str = "") -> None:
        """One push; 307/308 redirects are followed with the method and body (at most 10, the
        Authorization header kept with its host, as Go's client) unless follow_redirects is false."""
        ep = self.endpoint
        headers = self._headers(trace_id)
        try:
            client = self._client()
        except Exception as e:   # its TLS files unreadable now (rotated, not there yet): try again later
            raise RetryableError(f"POST {ep.shown_url}{PUSH_PATH}: {printable(e)}") from None
        try:
            # remote_timeout bounds the whole push, not each read (a receiver dripping its answer)
            resp, payload = client.request("POST", self.url, headers, body, sni_hostname=ep.server_name,
                                           max_body=MAX_ANSWER, deadline=ep.remote_timeout_s)
        except (httpx.TooManyRedirects, httpx.UnsupportedProtocol, httpx.InvalidURL) as e:
            raise PermanentError(f"POST {ep.shown_url}{PUSH_PATH}: {_describe(e)}") from None
        except httpx.HTTPError as e:
            raise RetryableError(f"POST {ep.shown_url}{PUSH_PATH}: {_describe(e)}") from None
        status = resp.status_code
        if status == 200:
            return
        if resp.is_redirect:   # only when not followed
            raise PermanentError(f"POST {ep.shown_url}{PUSH_PATH}: HTTP {status} redirect to "
                                 f"{printable(redact_url(resp.headers.get('Location', '')), 200)} (follow_redirects is false)")
        message = f"POST {ep.shown_url}{PUSH_PATH}: HTTP {status}{_connect_error(payload)}"
        if status >= 500 or status == 408 or (status == 429 and ep.retry_on_http_429):
            raise RetryableError(message)
        raise PermanentError(message)


def _describe(e: BaseException) -> str:
    if isinstance(e, httpx.TimeoutException):
        return "timed out (remote_timeout)"
    return printable(describe(e))


def _connect_error(payload: bytes) -> str:
    """The `message` of a Connect error body (`{"code": ..., "message": ...}`), else the start of
    the body; what the server sent is escaped (it goes into log lines)."""
    try:
        err = json.loads(payload)
        return f": {printable(err.get('code', ''), 40)}: {printable(err.get('message', ''))}"
    except (ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        return f": {printable(payload[:200], 200)}" if payload else ""


class PyroscopePusher:
    """Pushes profiles to one Pyroscope endpoint, from a queue of its own."""

    def __init__(self, endpoint: PyroscopeEndpoint, *, queue_size: int = 64,
                 queue_bytes: int = DEFAULT_QUEUE_BYTES, logger: logging.Logger = log,
                 on_health=None, on_latency=None) -> None:
        """`on_health(error)`: the endpoint started failing (the error) or accepts again ("").
        `on_latency(kind, seconds)`: Alloy's latency kinds, `push_downstream` for each attempt
        and `push_endpoint` for all the tries of one request (retries and backoff included)."""
        endpoint.validate()
        self.endpoint = endpoint
        self.metrics = DeliveryMetrics()
        self._client = _ConnectClient(endpoint)
        self._log = logger
        self._on_latency = on_latency
        self._queue = DeliveryQueue(
            endpoint.display_name, self._send, capacity=queue_size, max_bytes=queue_bytes,
            backoff=Backoff(endpoint.min_backoff_s, endpoint.max_backoff_s, endpoint.max_backoff_retries),
            metrics=self.metrics, logger=logger, abort=self._client.abort, on_health=on_health,
            on_delivered=(lambda s: on_latency("push_endpoint", s)) if on_latency else None)
        self.latency_s: list[float] = []   # of the last successful pushes (bounded)

    def push(self, series: list[PushSeries]) -> bool:
        """Queue one PushRequest with these series. Never blocks; False = dropped (and counted)."""
        valid: list[tuple[list[tuple[str, str]], bytes]] = []
        for s in series:
            labels = series_labels(s.labels)
            why = validate_labels(labels)
            if why is not None:
                self.metrics.add(dropped_items=1, dropped_bytes=len(s.raw_profile))
                self._queue.log.warning(f"{self.endpoint.display_name}: dropped a profile: invalid labels: {why}")
                continue
            valid.append((labels, s.raw_profile))
        if not valid:
            return False
        size = sum(len(raw) for _, raw in valid)
        # One trace per push request, its tries spans of it (as Alloy's Push span and client spans).
        return self._queue.offer((os.urandom(16).hex(), valid), size=size, count=len(valid))

    def push_many(self, series: list[PushSeries]) -> list[bool]:
        """Queue these series in as few PushRequests as BATCH_SERIES and BATCH_BYTES allow (one
        interval's profiles of many targets: a request each cost ~1 ms of CPU on the client); one
        True/False (dropped) per series."""
        oks: list[bool] = []
        chunk: list[PushSeries] = []
        size = 0
        for s in series + [None]:
            if chunk and (s is None or len(chunk) >= BATCH_SERIES or size + len(s.raw_profile) > BATCH_BYTES):
                ok = self.push(chunk)
                oks.extend([ok] * len(chunk))
                chunk, size = [], 0
            if s is not None:
                chunk.append(s)
                size += len(s.raw_profile)
        return oks

    def _send(self, item: tuple[str, list[tuple[list[tuple[str, str]], bytes]]]) -> PartlySent | None:
        trace_id, series = item
        try:
            self._post(series, trace_id)
            return None
        except PermanentError:
            if len(series) == 1:
                raise
        return self._send_apart(trace_id, series)

    def _send_apart(self, trace_id: str, series: list) -> PartlySent:
        """A request of several series refused for good: the receiver refuses a whole request for
        one bad series, so each is sent on its own and only the refused ones are lost (counted and
        said). If the receiver fails meanwhile, the series not sent yet are queued again, each on
        its own, rather than the whole request tried again (which would send some twice).
        What was sent."""
        sent = [0, 0]
        for i, one in enumerate(series):
            try:
                self._post([one], trace_id)
            except PermanentError as e:
                self.metrics.add(dropped_items=1, dropped_bytes=len(one[1]))
                self._queue.log.warning(f"{self.endpoint.display_name}: dropped 1 profile: refused by the receiver: {e}")
                continue
            except Exception:       # noqa: BLE001 - failing now: the rest waits in the queue
                for rest in series[i:]:
                    self._queue.offer((trace_id, [rest]), size=len(rest[1]), count=1)
                break
            sent[0] += 1
            sent[1] += len(one[1])
        return PartlySent(sent[0], sent[1])

    def _post(self, series: list[tuple[list[tuple[str, str]], bytes]], trace_id: str) -> None:
        # Encoded on the delivery thread, so the caller pays only for the queue.
        body = encode_push_request(series)
        start = time.monotonic()
        try:
            self._client.post(body, trace_id)
        finally:
            if self._on_latency is not None:
                self._on_latency("push_downstream", time.monotonic() - start)
        self.latency_s = (self.latency_s + [time.monotonic() - start])[-100:]
        log.debug("%s: pushed %d series (%d bytes) in %.3f s", self.endpoint.display_name, len(series), len(body),
                  self.latency_s[-1])

    def pending(self) -> int:
        return self._queue.pending()

    @property
    def failing(self) -> str:
        """The last error while the endpoint fails, else ""."""
        return self._queue.failing

    @property
    def held_bytes(self) -> int:
        return self._queue.held_bytes

    def close(self, deadline_s: float = FLUSH_DEADLINE_S) -> bool:
        """Flush what is queued within `deadline_s`; the rest is dropped, counted and said."""
        done = self._queue.close(deadline_s)
        if done:
            self._client.close()    # else the delivery thread still owns it (and closes it)
        return done
