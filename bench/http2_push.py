#!/usr/bin/env python3
"""What a push costs pyroscope.write's client. hotstack's push client (export/pyroscope.py, on httpx:
HTTP/2 over TLS when enable_http2 and the server picks it by ALPN, else HTTP/1.1) with enable_http2
true and false, next to the standard library's http.client on one keep-alive HTTP/1.1 connection
(what the push client was before it moved to httpx), same TLS loopback server (hypercorn, which
speaks both), same Connect push requests sent one after the other as pyroscope.write sends them.

    .venv/bin/python bench/http2_push.py [--pushes 2000] [--size 30000]     (hypercorn: a test dependency)
Prints, per client: wall time per push and the client's CPU time per push (the server runs in
another process).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

SERVER = textwrap.dedent("""
    import asyncio, sys
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/proto"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    config = Config()
    config.bind = ["127.0.0.1:" + sys.argv[1]]
    config.certfile, config.keyfile = sys.argv[2], sys.argv[3]
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.keep_alive_max_requests = 10 ** 9   # its default (1000) would end the connection mid-run
    asyncio.run(serve(app, config))
""")


def make_cert(d: str) -> tuple[str, str]:
    cert, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(name: str, send, pushes: int) -> None:
    for _ in range(20):   # warm up: connection, TLS, ALPN
        send()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(pushes):
        send()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{name:34} {1e6 * wall / pushes:9.0f} us/push wall {1e6 * cpu / pushes:9.0f} us/push client CPU")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushes", type=int, default=2000)
    ap.add_argument("--size", type=int, default=30000, help="bytes of profile per push")
    args = ap.parse_args()
    import httpx

    from hotstack.export.pyroscope import PUSH_PATH, PyroscopeEndpoint, _ConnectClient, encode_push_request

    body = encode_push_request([([("__name__", "process_cpu"), ("service_name", "bench")], os.urandom(args.size))])
    with tempfile.TemporaryDirectory() as d:
        cert, key = make_cert(d)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), cert, key])
        try:
            url = f"https://127.0.0.1:{port}"
            deadline = time.monotonic() + 20
            while True:
                try:
                    httpx.get(url, verify=cert)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            headers = {"Content-Type": "application/proto", "Connect-Protocol-Version": "1"}
            print(f"{args.pushes} pushes of {len(body)} bytes, one after the other, TLS on loopback")
            for http2 in (True, False):
                client = _ConnectClient(PyroscopeEndpoint(url=url, tls_ca_file=cert, enable_http2=http2))
                measure(f"hotstack, enable_http2 = {str(http2).lower()}", lambda: client.post(body), args.pushes)
                client.close()
            import http.client
            import ssl
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(cafile=cert))

            def send() -> None:
                conn.request("POST", PUSH_PATH, body=body, headers=headers)
                r = conn.getresponse()
                r.read()
                assert r.status == 200
            measure("http.client (HTTP/1.1, keep-alive)", send, args.pushes)
            conn.close()
        finally:
            server.kill()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
