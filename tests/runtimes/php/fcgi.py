"""A small FastCGI client (the responder role) for the PHP-FPM test: one request per connection.

A request is BEGIN_REQUEST, the PARAMS stream (name-value pairs, then an empty record), an empty
STDIN; the answer is STDOUT/STDERR records up to END_REQUEST (app status, protocol status).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

VERSION = 1
BEGIN_REQUEST, END_REQUEST, PARAMS, STDIN, STDOUT, STDERR = 1, 3, 4, 5, 6, 7
RESPONDER = 1
_HEADER = struct.Struct(">BBHHBx")
MAX_CONTENT = 0xFFFF


@dataclass(frozen=True)
class Response:
    stdout: bytes
    stderr: bytes
    app_status: int
    protocol_status: int

    @property
    def body(self) -> bytes:
        """stdout after the CGI headers."""
        return self.stdout.partition(b"\r\n\r\n")[2]


def _record(kind: int, request_id: int, content: bytes) -> bytes:
    if len(content) > MAX_CONTENT:
        raise ValueError("record content over 65535 bytes")
    padding = -len(content) % 8
    return _HEADER.pack(VERSION, kind, request_id, len(content), padding) + content + b"\0" * padding


def _length(n: int) -> bytes:
    return bytes([n]) if n < 128 else struct.pack(">I", n | 0x80000000)


def encode_params(params: dict[str, str]) -> bytes:
    out = bytearray()
    for name, value in params.items():
        k, v = name.encode(), value.encode()
        out += _length(len(k)) + _length(len(v)) + k + v
    return bytes(out)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("FastCGI server closed the connection mid-record")
        data += chunk
    return bytes(data)


def request(address: tuple[str, int], params: dict[str, str], timeout: float = 30.0, request_id: int = 1) -> Response:
    """Send one request with `params` (and no body) and read the whole answer."""
    with socket.create_connection(address, timeout=timeout) as sock:
        begin = struct.pack(">HB5x", RESPONDER, 0)        # flags 0: the server closes after END_REQUEST
        payload = encode_params(params)
        chunks = [payload[i:i + MAX_CONTENT] for i in range(0, len(payload), MAX_CONTENT)]
        sock.sendall(_record(BEGIN_REQUEST, request_id, begin)
                     + b"".join(_record(PARAMS, request_id, c) for c in chunks)
                     + _record(PARAMS, request_id, b"") + _record(STDIN, request_id, b""))
        out, err = bytearray(), bytearray()
        while True:
            _version, kind, rid, length, padding = _HEADER.unpack(_read_exact(sock, _HEADER.size))
            content = _read_exact(sock, length + padding)[:length]
            if rid != request_id:
                continue
            if kind == STDOUT:
                out += content
            elif kind == STDERR:
                err += content
            elif kind == END_REQUEST:
                app_status, protocol_status = struct.unpack(">IB3x", content)
                return Response(bytes(out), bytes(err), app_status, protocol_status)
