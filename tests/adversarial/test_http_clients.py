"""Clients of the agent's HTTP server that reset or close their connection before the answer (a
scraper that times out, a slowloris): at most one debug line each in the log, never a traceback."""

from __future__ import annotations

import logging
import socket
import struct
import urllib.request

from hotstack.alloy.controller import load_config
from hotstack.alloy.server import AgentServer

CLIENTS = 24


def reset(address: tuple[str, int], request: bytes) -> None:
    """Send `request` and reset the connection (SO_LINGER 0: an RST, not a FIN) without reading."""
    with socket.create_connection(address, timeout=10) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(request)


def test_clients_that_reset_leave_no_traceback(capfd, caplog):
    server = AgentServer(load_config("", "empty.alloy"), "127.0.0.1:0")
    host, port = server.address.rsplit(":", 1)
    server.start()
    try:
        with caplog.at_level(logging.DEBUG, logger="hotstack.agent.http"):
            for i in range(CLIENTS):
                # half a request (the server is reading its headers when the reset comes), or a
                # whole one whose answer meets a reset connection
                reset((host, int(port)), b"GET /api/v0/web/components HTTP/1.1\r\nHost: x\r\n" if i % 2 else
                      b"GET /api/v0/web/components HTTP/1.1\r\nHost: x\r\n\r\n")
            # the server still answers
            with urllib.request.urlopen(f"http://{server.address}/-/healthy", timeout=10) as r:
                assert r.status == 200
    finally:
        server.stop()
    _, err = capfd.readouterr()
    assert "Traceback" not in err and "Exception occurred" not in err, err[:3000]
    went_away = [r for r in caplog.records if r.name == "hotstack.agent.http"]
    assert all(r.levelno == logging.DEBUG and "went away" in r.getMessage() for r in went_away), went_away
    assert 1 <= len(went_away) <= CLIENTS, len(went_away)
