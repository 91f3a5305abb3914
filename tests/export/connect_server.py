"""A Pyroscope push receiver for tests: speaks the Connect protocol and decodes each PushRequest.

The request is decoded with our push_pb2 only as a container of bytes; the pprof inside is then
checked by `go tool pprof` in the tests. `responses` scripts the answers (status codes, or
"hang" to never answer), the last one repeating.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hotstack.export.push_pb2 import PushRequest

PATH = "/push.v1.PusherService/Push"


class ConnectPushServer:
    def __init__(self, responses: list = (200,), hang_s: float = 30.0,
                 error_body: bytes = b'{"code":"unavailable","message":"scripted failure"}',
                 tls=None) -> None:
        """`tls`: an ssl.SSLContext to serve https:// with (e.g. one that requires a client certificate)."""
        self.responses = list(responses) or [200]
        self.error_body = error_body
        self.hang_s = hang_s
        self.requests: list[dict] = []      # every request: headers, decoded PushRequest, status sent
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with server._lock:
                    n = len(server.requests)
                    answer = server.responses[min(n, len(server.responses) - 1)]
                    record = {"path": self.path, "headers": dict(self.headers), "body": body, "status": answer}
                    server.requests.append(record)
                if answer == "hang":
                    server._stop.wait(server.hang_s)
                    return
                if self.path != PATH or self.headers.get("Content-Type") != "application/proto":
                    answer = 415
                if answer == 200:
                    record["request"] = PushRequest.FromString(body)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/proto")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                payload = server.error_body
                self.send_response(answer)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
            self.url = f"https://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def accepted(self) -> list[PushRequest]:
        with self._lock:
            return [r["request"] for r in self.requests if "request" in r]

    def wait_for(self, n: int, timeout: float = 10.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if len(self.requests) >= n:
                    return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
