"""OTLP profiles over gRPC: `ProfilesService/Export`, one request per interval, from a queue.

The request is encoded on the delivery thread (not the sampling one), in the wire layout the
receiver was built with (`protocol_version`), and sent with gzip or no compression. Retries follow
the OTLP specification's retryable status codes; anything else drops the request (counted).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import ConfigError
from ..profile.otlp import DEFAULT_VERSION, VERSIONS, response_class
from .delivery import (FLUSH_DEADLINE_S, Backoff, DeliveryMetrics, DeliveryQueue, PermanentError,
                       RetryableError, printable)

EXPORT_METHOD = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
COMPRESSIONS = ("none", "gzip")

# OTLP/gRPC: these codes may succeed later; the rest never will.
RETRYABLE = {"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS",
             "RESOURCE_EXHAUSTED"}

if TYPE_CHECKING:
    import grpc

log = logging.getLogger("hotstack.export.otlp")


@dataclass
class OtlpGrpcConfig:
    """One `operator.otel-profiles.exporters.<name>` block of ig-config.yaml."""

    name: str
    endpoint: str                      # host:port
    exporter: str = "otlp-grpc"
    insecure: bool = False             # False: TLS with the system's roots (or ca_file)
    compression: str = "none"
    protocol_version: str = DEFAULT_VERSION
    ca_file: str = ""
    timeout_s: float = 10.0
    queue_size: int = 16
    min_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    max_retries: int = 5

    def validate(self) -> None:
        where = f"exporter {self.name!r}"
        if self.exporter != "otlp-grpc":
            raise ConfigError(f"{where}: unsupported profile exporter {self.exporter!r}; expected one of otlp-grpc")
        if self.compression not in COMPRESSIONS:
            raise ConfigError(f"{where}: unsupported profile compression {self.compression!r}; "
                              f"expected none or gzip")
        if self.protocol_version not in VERSIONS:
            raise ConfigError(f"{where}: unsupported protocol-version {self.protocol_version!r}; "
                              f"expected one of {', '.join(VERSIONS)}")
        problem = endpoint_problem(self.endpoint)
        if problem:
            raise ConfigError(f"{where}: endpoint {self.endpoint!r}: {problem}")
        if self.ca_file and self.insecure:
            raise ConfigError(f"{where}: ca-file is for TLS; it cannot go with insecure: true")
        if self.ca_file:
            problem = ca_file_problem(self.ca_file)
            if problem:
                raise ConfigError(f"{where}: ca-file {self.ca_file!r}: {problem}")


# A DNS name as gRPC resolves it: labels of letters, digits, '-' and '_', dot-separated.
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?\Z")


def endpoint_problem(endpoint: str) -> str:
    """Why `endpoint` is not a gRPC host:port ("" when it is one). gRPC would take a URL or a
    name with a space as a name to resolve, and fail at each export ("Misformatted domain name")."""
    example = "expected host:port, e.g. 127.0.0.1:4317"
    if "://" in endpoint:
        return f"{example}, without a scheme (gRPC; insecure: true for plain text)"
    if any(c.isspace() for c in endpoint):
        return f"{example}, without spaces"
    host, port = split_host_port(endpoint)
    if not host or not port:
        return example
    if endpoint.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{example} ([{host}] is not an IPv6 address)"
    elif not _HOSTNAME.match(host):
        return f"{example} ({host!r} is not a host name or an IPv4 address)"
    return ""


def ca_file_problem(path: str) -> str:
    """Why `path` cannot serve as the roots that verify the receiver ("" when it can): gRPC would
    say it only in its own log lines, at the first export."""
    if not Path(path).is_file():
        return "no such file"
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError:
        return "no PEM certificate in it (a CA certificate, -----BEGIN CERTIFICATE-----, is needed)"
    except OSError as e:
        return f"cannot read it: {e.strerror}"
    return ""


def split_host_port(endpoint: str) -> tuple[str, int | None]:
    """`host:port` or `[v6]:port`; (host, None) when the port is missing or not a number."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or "]" in port:
        return endpoint.strip("[]"), None
    if not port.isdigit() or not 0 < int(port) < 65536:
        return host.strip("[]"), None
    return host.strip("[]"), int(port)


def _credentials(cfg: OtlpGrpcConfig) -> "grpc.ChannelCredentials":
    import grpc

    path = cfg.ca_file or ssl.get_default_verify_paths().cafile
    roots = Path(path).read_bytes() if path and Path(path).is_file() else None   # None: gRPC's own roots
    return grpc.ssl_channel_credentials(root_certificates=roots)


class OtlpProfilesExporter:
    """One configured exporter: its channel, queue and counters."""

    def __init__(self, cfg: OtlpGrpcConfig, logger: logging.Logger = log) -> None:
        cfg.validate()
        self.cfg = cfg
        self.metrics = DeliveryMetrics()
        self.rejected = 0                  # profiles the receiver reported as rejected (partial success)
        self._log = logger
        # grpc is imported here, not at module level: it costs ~0.1 s of start-up to every run
        # that exports nothing over OTLP.
        import grpc

        self._grpc = grpc
        if cfg.insecure:
            self._channel = grpc.insecure_channel(cfg.endpoint)
        else:
            self._channel = grpc.secure_channel(cfg.endpoint, _credentials(cfg))
        self._call = self._channel.unary_unary(EXPORT_METHOD, request_serializer=None,
                                               response_deserializer=response_class(cfg.protocol_version).FromString)
        self._compression = grpc.Compression.Gzip if cfg.compression == "gzip" else grpc.Compression.NoCompression
        self._queue = DeliveryQueue(
            cfg.name, self._send, capacity=cfg.queue_size,
            backoff=Backoff(cfg.min_backoff_s, cfg.max_backoff_s, cfg.max_retries),
            metrics=self.metrics, logger=logger, abort=self._abort)

    def _abort(self) -> None:
        """At the flush deadline: closing the channel cancels the call in flight (a hanging
        receiver would hold it for the whole timeout)."""
        self._channel.close()

    def export(self, encode: Callable[[str], bytes], count: int = 1) -> bool:
        """Queue one request; `encode(protocol_version)` is called on the delivery thread.
        Never blocks; False = dropped (and counted)."""
        return self._queue.offer(_Lazy(encode, self.cfg.protocol_version), count=count)

    def _send(self, request: "_Lazy") -> int:
        body = request.bytes()
        try:
            response = self._call(body, timeout=self.cfg.timeout_s, compression=self._compression)
        except self._grpc.RpcError as e:
            grpc = self._grpc
            code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
            details = e.details() if hasattr(e, "details") else e
            message = f"Export to {self.cfg.endpoint}: {code.name}: {printable(details)}"
            if code == grpc.StatusCode.UNIMPLEMENTED:
                message += " (does the receiver accept profiles? the Collector needs " \
                           "--feature-gates=service.profilesSupport)"
            if code.name in RETRYABLE:
                raise RetryableError(message) from None
            raise PermanentError(message) from None
        partial = response.partial_success
        if partial.rejected_profiles or partial.error_message:
            self.rejected += partial.rejected_profiles
            self._queue.log.warning(f"{self.cfg.name}: {partial.rejected_profiles} profiles rejected: "
                                    f"{printable(partial.error_message)}")
        return len(body)

    def pending(self) -> int:
        return self._queue.pending()

    def close(self, deadline_s: float = FLUSH_DEADLINE_S) -> bool:
        done = self._queue.close(deadline_s)
        self._channel.close()
        return done


class _Lazy:
    """A request encoded once, on first use (retries resend the same bytes)."""

    __slots__ = ("_encode", "_version", "_bytes")

    def __init__(self, encode: Callable[[str], bytes], version: str) -> None:
        self._encode = encode
        self._version = version
        self._bytes: bytes | None = None

    def bytes(self) -> bytes:
        if self._bytes is None:
            self._bytes = self._encode(self._version)
        return self._bytes
