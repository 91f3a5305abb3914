"""The agent's HTTP server sleeps until a connection comes (socketserver's loop wakes every 0.5 s),
answers at once, and stops at once."""

from __future__ import annotations

import time
import urllib.request

from hotstack.alloy.controller import load_config
from hotstack.alloy.server import AgentServer


def test_idle_server_does_not_wake_and_stops_at_once():
    server = AgentServer(load_config("", "empty.alloy"), "127.0.0.1:0")
    rounds: list[float] = []
    real = server.httpd.service_actions
    server.httpd.service_actions = lambda: rounds.append(time.monotonic()) or real()
    server.start()
    try:
        time.sleep(2.0)
        idle_rounds = len(rounds)
        with urllib.request.urlopen(f"http://{server.address}/-/healthy", timeout=10) as r:
            assert r.status == 200
    finally:
        started = time.monotonic()
        server.stop()
        stopped_in = time.monotonic() - started
    assert idle_rounds == 0, f"the server's loop ran {idle_rounds} times in 2 s with no request"
    assert len(rounds) >= 1       # the request was served by the loop
    assert stopped_in < 1.0, stopped_in
