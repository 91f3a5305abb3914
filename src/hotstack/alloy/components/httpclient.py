"""Small JSON-over-HTTP helpers for discovery: unix sockets (Docker) and TLS (Kubernetes).

The standard library's http.client is enough for a list and a streamed watch; a unix
socket only needs a connection class that dials the socket instead of a TCP address.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.parse


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class HTTPError(Exception):
    pass


def connection_for(url: str, timeout: float, context: ssl.SSLContext | None = None):
    """(connection, base path) for http://, https:// and unix:// URLs."""
    u = urllib.parse.urlsplit(url)
    if u.scheme == "unix":
        return UnixHTTPConnection(u.path, timeout), ""
    if u.scheme == "http":
        return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout), u.path.rstrip("/")
    if u.scheme == "https":
        return (http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout, context=context),
                u.path.rstrip("/"))
    raise HTTPError(f"unsupported URL scheme {u.scheme!r} in {url!r} (use unix://, http:// or https://)")


def get_json(url: str, path: str, headers: dict[str, str] | None = None, timeout: float = 10.0,
             context: ssl.SSLContext | None = None) -> object:
    conn, base = connection_for(url, timeout, context)
    try:
        conn.request("GET", base + path, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
    except OSError as e:
        raise HTTPError(f"cannot reach {url}: {e.strerror or e}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise HTTPError(f"GET {path} on {url}: HTTP {resp.status}: {body[:200].decode(errors='replace').strip()}")
    try:
        return json.loads(body)
    except ValueError:
        raise HTTPError(f"GET {path} on {url}: the response is not JSON") from None
