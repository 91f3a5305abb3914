"""pyroscope.write against endpoints that fail (issue 18, items 4 and 6): the first failure is in
the log at once, escaped; the component is unhealthy while the endpoint fails and healthy again
after; a stop with a hanging endpoint ends within the flush deadline and says what was dropped."""

from __future__ import annotations

import signal
import socket
import threading
import time

import pytest

from tests.export.connect_server import ConnectPushServer

from ..conftest import wait_for

pytestmark = pytest.mark.root

GARBAGE = b"\x1b[31mEVIL\x1b[0m\r\nInjected-Header: yes\x00\xff<html>"


def _config(pid: int, url: str) -> str:
    return (f'pyroscope.ebpf "e" {{\n  targets = [{{"__process_pid__" = "{pid}", "service_name" = "spin"}}]\n'
            f'  forward_to = [pyroscope.write.w.receiver]\n  collect_interval = "1s"\n}}\n'
            f'pyroscope.write "w" {{\n  endpoint {{\n    url = "{url}"\n  }}\n}}\n')


def test_failures_are_heard_at_once_and_health_follows_the_endpoint(agent, spin_binary, workloads):
    w = workloads([spin_binary])
    server = ConnectPushServer([500], error_body=GARBAGE)
    try:
        a = agent(_config(w.pid, server.url))
        a.wait_ready()
        assert server.wait_for(1, timeout=60), a.log.read_text()
        first = time.monotonic()
        # Logged at once (default backoff: Alloy's 10 retries over minutes would say nothing).
        line = wait_for(lambda: next((ln for ln in a.log.read_text().splitlines() if "push failed" in ln), None),
                        timeout=10)
        assert line, a.log.read_text()[-3000:]
        assert time.monotonic() - first < 10
        # What the server sent is escaped: no control character of its reaches the log.
        assert "HTTP 500: \\x1b[31mEVIL\\x1b[0m\\r\\nInjected-Header: yes\\x00\\xff<html>" in line, line
        assert "\x1b" not in a.log.read_text()
        status, text = a.get("/-/healthy")
        assert status == 500 and "pyroscope.write.w" in text and "HTTP 500" in text, text
        page = a.json("/api/v0/web/components/pyroscope.write.w")
        assert page["health"]["state"] == "unhealthy" and page["health"]["message"].startswith(
            f"endpoint {server.url}: POST"), page["health"]
        assert page["debug_info"]["endpoints"][0]["failing"]
        metrics = a.get("/metrics")[1]
        assert [ln for ln in metrics.splitlines() if ln.startswith("pyroscope_write_errors_total")
                and not ln.endswith(" 0.0")], metrics
        # The endpoint recovers: a retry goes through and the component is healthy again.
        server.responses = [200]
        assert wait_for(lambda: a.get("/-/healthy")[0] == 200, timeout=60), a.get("/-/healthy")
        assert wait_for(lambda: server.accepted(), timeout=30)
        assert "the receiver accepts again" in a.log.read_text()
        assert a.json("/api/v0/web/components/pyroscope.write.w")["health"]["state"] == "healthy"
    finally:
        server.close()


def test_sigterm_with_a_hanging_endpoint_stops_within_the_flush_deadline(agent, spin_binary, workloads):
    """Issue 18 item 6: a stop took ~7 s with a failing endpoint. The flush deadline is 3 s; the
    profiler's own stop comes on top (under a second here)."""
    w = workloads([spin_binary])
    server = ConnectPushServer(["hang"], hang_s=120)
    try:
        a = agent(_config(w.pid, server.url))
        a.wait_ready()
        assert server.wait_for(1, timeout=60), a.log.read_text()
        time.sleep(3)      # more profiles queue behind the hanging one
        start = time.monotonic()
        a.proc.send_signal(signal.SIGTERM)
        a.proc.wait(timeout=60)
        took = time.monotonic() - start
        log = a.log.read_text()
        assert a.proc.returncode == 0, log[-3000:]
        assert took < 4.5, (took, log[-3000:])
        assert "stopped at shutdown (flush deadline" in log and "dropped" in log, log[-3000:]
        assert "Traceback" not in log
    finally:
        server.close()


class SlowDripServer:
    """A receiver on 127.0.0.1 that reads a push whole and answers one byte a second (a status
    line that never ends): every read of the client's gets data well within any read timeout."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[float] = []        # seconds from each request read to the client leaving
        self._closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n")
                               if ln.lower().startswith(b"content-length:")), b"0"))
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            started = time.monotonic()
            try:
                for byte in b"HTTP/1.1 200 OK\r\nX-Drip: " + b"a" * 600:
                    if self._closed.wait(1.0):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:      # the client gave up: how long it held on is what the test reads
                pass
            else:
                return
            self.held.append(time.monotonic() - started)

    def close(self) -> None:
        self._closed.set()
        self.sock.close()


def test_remote_timeout_bounds_the_whole_push(agent, spin_binary, workloads):
    """Issue 47 item 5: against a receiver that answers a byte a second, remote_timeout = "2s"
    never fired (each read got its byte in time): after 10 s the component was healthy, with no
    log line, nothing sent, no retry and no drop. remote_timeout is the whole request's."""
    w = workloads([spin_binary])
    server = SlowDripServer()
    try:
        config = _config(w.pid, server.url).replace(f'url = "{server.url}"\n',
                                                    f'url = "{server.url}"\n    remote_timeout = "2s"\n')
        a = agent(config)
        a.wait_ready()
        line = wait_for(lambda: next((ln for ln in a.log.read_text().splitlines() if "push failed" in ln), None),
                        timeout=60)
        assert line and "timed out (remote_timeout)" in line, a.log.read_text()[-3000:]
        assert wait_for(lambda: server.held, timeout=10), "the receiver's connection was never given up"
        # 2 s, and the ticks of the drip that notice the connection is gone, with room for a busy host
        assert all(held < 8 for held in server.held), server.held
        status, text = a.get("/-/healthy")
        assert status == 500 and "remote_timeout" in text, text
        metrics = a.get("/metrics")[1]
        assert [ln for ln in metrics.splitlines() if ln.startswith("pyroscope_write_errors_total")
                and not ln.endswith(" 0.0")], metrics
    finally:
        server.close()
