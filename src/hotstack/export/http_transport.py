"""HTTP requests on httpx: HTTP/1.1, and HTTP/2 where the server offers it over TLS (ALPN), as
Go's client does when HTTP/2 is enabled; proxies per URL pattern; redirects; unix sockets.

One `Transport` is one component's client (its connection pool, kept alive between requests).
`abort()` cuts the requests in flight from another thread: a hanging receiver would hold a
request until its timeout, and a stop must not wait that long. httpx closes a pool, but a
socket closed under a thread blocked in recv() does not wake it; shutting the socket down
does. The sockets are learnt from httpx's documented `trace` extension (each new connection's).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import weakref

import httpx

MAX_REDIRECTS = 10   # Go's http.Client stops after 10

# Each new stream of a connection: its socket (TCP, unix), then the TLS one over it (which takes
# the socket's descriptor over: only the TLS socket can be shut then), through a proxy too.
_STREAM_EVENTS = ("connect_tcp.complete", "connect_unix_socket.complete", "start_tls.complete")

# httpx logs each request's URL at INFO (a password in it too) and httpcore each step at DEBUG:
# hotstack says what fails itself, with URLs redacted, so theirs stay quiet below WARNING.
for _name in ("httpx", "httpcore"):
    logging.getLogger(_name).setLevel(logging.WARNING)


class Transport:
    """`proxies`: httpx mount patterns ("all://", "https://", "all://*.example.com") to the
    proxy for them, or None for "go direct" (no_proxy entries)."""

    def __init__(self, *, timeout: float, verify: ssl.SSLContext | bool = True, http2: bool = True,
                 proxies: dict[str, httpx.Proxy | None] | None = None, uds: str = "",
                 follow_redirects: bool = True) -> None:
        self._streams: "weakref.WeakSet" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._expired = False     # a request's deadline passed: its new connections are shut at once
        mounts = {pattern: None if proxy is None else httpx.HTTPTransport(verify=verify, http2=http2, proxy=proxy)
                  for pattern, proxy in (proxies or {}).items()}
        self.client = httpx.Client(transport=httpx.HTTPTransport(verify=verify, http2=http2, uds=uds or None),
                                   mounts=mounts, timeout=httpx.Timeout(timeout), trust_env=False,
                                   follow_redirects=follow_redirects, max_redirects=MAX_REDIRECTS)

    def _trace(self, name: str, info: dict) -> None:
        if name.endswith(_STREAM_EVENTS) and info.get("return_value") is not None:
            with self._lock:
                self._streams.add(info["return_value"])
                expired = self._expired
            if expired:
                self.abort()

    @contextlib.contextmanager
    def stream(self, method: str, url: str, headers: dict[str, str], content: bytes | None = None,
               sni_hostname: str = "", timeout: float | None = None):
        """An httpx.Response whose body is read by the caller (iter_bytes), closed on exit."""
        extensions = {"trace": self._trace}
        if sni_hostname:   # tls_config.server_name: the name sent and checked in the certificate
            extensions["sni_hostname"] = sni_hostname
        request = self.client.build_request(method, url, headers=headers, content=content, extensions=extensions,
                                            timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)
        response = self.client.send(request, stream=True)
        try:
            yield response
        finally:
            response.close()

    def request(self, method: str, url: str, headers: dict[str, str], content: bytes | None = None,
                sni_hostname: str = "", max_body: int = 256 << 20,
                deadline: float | None = None) -> tuple[httpx.Response, bytes]:
        """One request (redirects followed as the client allows), its body read up to max_body + 1
        bytes (the caller tells a body too large by its length).

        `deadline`: seconds for the whole request, connect, send and the full answer; httpx's
        timeouts bound each read, so a server that drips its answer a byte at a time would hold
        it for ever. At the deadline the transport's connections are shut (abort()) and the
        request fails with httpx.TimeoutException. Only for a transport that one thread uses."""
        if deadline is None:
            return self._request(method, url, headers, content, sni_hostname, max_body)
        with self._lock:
            self._expired = False
        timer = threading.Timer(deadline, self._expire)
        timer.daemon = True
        timer.start()
        try:
            answer = self._request(method, url, headers, content, sni_hostname, max_body)
        except httpx.HTTPError as e:
            if self._expired:
                raise httpx.TimeoutException(f"no whole answer within {deadline:g} s") from e
            raise
        finally:
            timer.cancel()
        if self._expired:    # an answer cut at the deadline can look whole (a body read to EOF)
            raise httpx.TimeoutException(f"no whole answer within {deadline:g} s")
        return answer

    def _expire(self) -> None:
        with self._lock:
            self._expired = True
        self.abort()

    def _request(self, method: str, url: str, headers: dict[str, str], content: bytes | None,
                 sni_hostname: str, max_body: int) -> tuple[httpx.Response, bytes]:
        with self.stream(method, url, headers, content, sni_hostname) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > max_body:
                    break
            return response, b"".join(chunks)

    def abort(self) -> None:
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            sock = stream.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.client.close()


def describe(e: BaseException) -> str:
    """What went wrong with a request, in a few words (no body, no header)."""
    if isinstance(e, httpx.TimeoutException):
        return "timed out"
    if isinstance(e, httpx.TooManyRedirects):
        return f"more than {MAX_REDIRECTS} redirects"
    cause = e.__context__ if isinstance(e, httpx.TransportError) and e.__context__ is not None else e
    return str(getattr(cause, "strerror", None) or cause or type(e).__name__)
