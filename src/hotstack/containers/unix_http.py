"""HTTP over a unix socket (the Docker Engine API's usual transport), with http.client."""

from __future__ import annotations

import http.client
import json
import socket


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection that dials a unix socket instead of a TCP address."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def get_json(socket_path: str, path: str, timeout: float = 2.0, max_bytes: int = 16 << 20) -> tuple[int, object]:
    """(status, decoded JSON or None). OSError when the socket does not answer."""
    conn = UnixHTTPConnection(socket_path, timeout)
    try:
        conn.request("GET", path, headers={"Accept": "application/json"})
        resp = conn.getresponse()
        body = resp.read(max_bytes)
    except http.client.HTTPException as e:
        raise OSError(f"bad HTTP answer on {socket_path}: {e}") from None
    finally:
        conn.close()
    try:
        return resp.status, json.loads(body) if body else None
    except ValueError:
        return resp.status, None
