"""pyroscope.write's HTTP client as Alloy's: oauth2 (its token asked for through the oauth2 block's
proxy), the push through a proxy, TLS with a client certificate, HTTP/2 by ALPN (enable_http2),
307/308 redirects, trace context headers (the `tracing` block), debug_info_upload_timeout said to
have no effect. Loopback peers shaped like the real ones: a Connect push server, an HTTP/2 server
(hypercorn), an RFC 6749 token server, a forward proxy."""

from __future__ import annotations

import logging
import re


from ..conftest import wait_for
from ..export.connect_server import PATH, ConnectPushServer
from .conftest import running, started
from .peers import H2PushServer, HTTPProxy, OAuth2TokenServer, RedirectServer, make_pki

LABELS = {"__name__": "process_cpu", "service_name": "svc"}


def push(c, n: int = 1) -> None:
    receiver = c.component("pyroscope.write.w").exports["receiver"]
    for _ in range(n):
        receiver.append(dict(LABELS), b"not-a-real-pprof", None)


def write_config(url: str, body: str = "", top: str = "") -> str:
    return f'pyroscope.write "w" {{\n{top}  endpoint {{\n    url = "{url}"\n{body}  }}\n}}\n'


def test_oauth2_token_through_the_oauth2_proxy_and_the_push_through_the_endpoint_proxy(tmp_path):
    server = ConnectPushServer()
    tokens = OAuth2TokenServer("hotstack", "cs-1", "tok-xyz")
    token_proxy, push_proxy = HTTPProxy(), HTTPProxy()
    try:
        with running(write_config(server.url, f'    proxy_url = "{push_proxy.url}"\n    oauth2 {{\n'
                                              f'      client_id = "hotstack"\n      client_secret = "cs-1"\n'
                                              f'      token_url = "{tokens.url}"\n      scopes = ["push"]\n'
                                              f'      proxy_url = "{token_proxy.url}"\n    }}\n')) as c:
            push(c, 2)
            assert wait_for(lambda: len(server.accepted()) == 2), server.requests
            # the token request went through the oauth2 block's proxy, once (the token is kept)
            assert token_proxy.requests == [f"POST {tokens.url}"], token_proxy.requests
            assert tokens.forms == [{"grant_type": "client_credentials", "scope": "push"}]
            # the pushes through the endpoint's proxy, in absolute form, with the token
            assert push_proxy.requests == [f"POST {server.url}{PATH}"] * 2, push_proxy.requests
            assert all(r["headers"]["Authorization"] == "Bearer tok-xyz" for r in server.requests)
    finally:
        for s in (server, tokens, token_proxy, push_proxy):
            s.close()


def test_oauth2_token_server_down_is_retried_not_lost(tmp_path):
    server = ConnectPushServer()
    try:
        with running(write_config(server.url, '    min_backoff_period = "50ms"\n    max_backoff_retries = 2\n'
                                              '    oauth2 {\n      client_id = "a"\n      client_secret = "b"\n'
                                              '      token_url = "http://127.0.0.1:1/token"\n    }\n')) as c:
            push(c)
            comp = c.component("pyroscope.write.w")
            assert wait_for(lambda: comp.pushers[0].metrics.snapshot()["dropped_items"] == 1, timeout=10)
            snap = comp.pushers[0].metrics.snapshot()
            assert snap["retries"] == 2 and server.requests == []
            assert "oauth2" in comp.health.message or "127.0.0.1:1" in comp.health.message, comp.health
    finally:
        server.close()


def test_https_with_a_client_certificate_and_server_name(tmp_path):
    pki = make_pki(tmp_path)
    server = ConnectPushServer(tls=pki.server_context(require_client_cert=True))
    try:
        tls = f'      ca_file = "{pki.ca}"\n      server_name = "docker.test"\n'
        with_cert = tls + f'      cert_file = "{pki.client_cert}"\n      key_file = "{pki.client_key}"\n'
        with running(write_config(server.url, f"    tls_config {{\n{with_cert}    }}\n")) as c:
            push(c)
            assert wait_for(lambda: len(server.accepted()) == 1), server.requests
        # without the certificate the server refuses the handshake: nothing arrives, it is dropped
        with running(write_config(server.url, f'    max_backoff_retries = 1\n    min_backoff_period = "50ms"\n'
                                              f"    tls_config {{\n{tls}    }}\n")) as c:
            push(c)
            comp = c.component("pyroscope.write.w")
            assert wait_for(lambda: comp.pushers[0].metrics.snapshot()["dropped_items"] == 1, timeout=10)
            assert len(server.accepted()) == 1
    finally:
        server.close()


def test_a_rotated_client_certificate_is_used_for_the_next_push(tmp_path):
    """cert_file/key_file are read again when they change on disk (cert-manager, a projected
    secret): a push refused with a certificate the server does not trust goes through once the
    files hold one it does, with no restart or reload."""
    import shutil
    import subprocess

    pki = make_pki(tmp_path)
    server = ConnectPushServer(tls=pki.server_context(require_client_cert=True))
    cert, key = tmp_path / "live.pem", tmp_path / "live.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=untrusted"], check=True, capture_output=True, timeout=60)
    try:
        with running(write_config(server.url, f'    min_backoff_period = "200ms"\n    max_backoff_period = "200ms"\n'
                                              f'    max_backoff_retries = 0\n    tls_config {{\n'
                                              f'      ca_file = "{pki.ca}"\n      cert_file = "{cert}"\n'
                                              f'      key_file = "{key}"\n    }}\n')) as c:
            push(c)
            comp = c.component("pyroscope.write.w")
            assert wait_for(lambda: comp.pushers[0].metrics.snapshot()["retries"] >= 2, timeout=20)
            assert server.accepted() == []           # the handshake was refused
            shutil.copy(pki.client_cert, cert)      # rotated: the files now hold a trusted pair
            shutil.copy(pki.client_key, key)
            assert wait_for(lambda: len(server.accepted()) == 1, timeout=20), comp.health
    finally:
        server.close()


def test_307_redirect_is_followed_and_refused_when_follow_redirects_is_false(caplog):
    server = ConnectPushServer()
    redirect = RedirectServer(server.url, status=307)
    try:
        with running(write_config(f"http://{redirect.url}")) as c:
            push(c)
            assert wait_for(lambda: len(server.accepted()) == 1), (redirect.requests, server.requests)
            assert redirect.requests == [PATH]
        with running(write_config(f"http://{redirect.url}", "    follow_redirects = false\n")) as c:
            push(c)
            comp = c.component("pyroscope.write.w")
            assert wait_for(lambda: comp.pushers[0].metrics.snapshot()["dropped_items"] == 1, timeout=10)
            said = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
            assert said and "HTTP 307 redirect to" in said[0] and "(follow_redirects is false)" in said[0], said
            assert len(server.accepted()) == 1
    finally:
        redirect.close()
        server.close()


TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-00\Z")
UBER = re.compile(r"([0-9a-f]{32}):([0-9a-f]{16}):0:0\Z")


def test_tracing_propagators_as_alloy_defaults_and_off():
    """Both propagators are on by default (Alloy's `tracing` block): each push carries its trace
    in W3C and Jaeger form; the tries of one push share the trace, each with its own span."""
    server = ConnectPushServer([503, 200])
    try:
        with running(write_config(server.url, '    min_backoff_period = "50ms"\n')) as c:
            push(c)
            assert wait_for(lambda: len(server.accepted()) == 1)
            first, second = (r["headers"] for r in server.requests)
            t1, s1 = TRACEPARENT.match(first["traceparent"]).groups()
            t2, s2 = TRACEPARENT.match(second["traceparent"]).groups()
            assert t1 == t2 and s1 != s2            # one push, two tries
            assert UBER.match(second["uber-trace-id"]).groups() == (t2, s2)
        server.requests.clear()
        server.responses = [200]
        with running(write_config(server.url, top="  tracing {\n    jaeger_propagator = false\n  }\n")) as c:
            push(c, 2)
            assert wait_for(lambda: len(server.accepted()) == 2)
            a, b = (r["headers"] for r in server.requests)
            assert "uber-trace-id" not in a and TRACEPARENT.match(a["traceparent"])
            assert a["traceparent"][3:35] != b["traceparent"][3:35]   # a new trace per push
        server.requests.clear()
        with running(write_config(server.url, top="  tracing {\n    jaeger_propagator = false\n"
                                                  "    trace_context_propagator = false\n  }\n")) as c:
            push(c)
            assert wait_for(lambda: len(server.accepted()) == 1)
            assert not {"traceparent", "uber-trace-id"} & {k.lower() for k in server.requests[0]["headers"]}
    finally:
        server.close()


def test_debug_info_upload_timeout_is_said_to_have_no_effect(caplog):
    server = ConnectPushServer()
    try:
        with caplog.at_level(logging.WARNING):
            c = started(write_config(server.url, '    debug_info_upload_timeout = "30s"\n'))
            c.stop()
        said = [r.getMessage() for r in caplog.records if "debug_info_upload_timeout" in r.getMessage()]
        assert len(said) == 1 and "no effect" in said[0], said
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            c = started(write_config(server.url, '    debug_info_upload_timeout = "2m"\n'))   # Alloy's default
            c.stop()
        assert not [r for r in caplog.records if "debug_info_upload_timeout" in r.getMessage()]
    finally:
        server.close()


def test_http2_over_tls_as_go_negotiates_it_and_http1_when_enable_http2_is_false(tmp_path):
    """Alloy's enable_http2 (true by default): HTTP/2 offered in the TLS handshake and spoken when
    the server picks it; false: HTTP/1.1. A plain http:// endpoint is HTTP/1.1 either way (Go
    speaks no cleartext HTTP/2). The server is hypercorn, which speaks both."""
    pki = make_pki(tmp_path)
    tls, plain = H2PushServer(pki), H2PushServer(pki, tls=False)
    try:
        for server, body, version in ((tls, "", "2"), (tls, "    enable_http2 = false\n", "1.1"), (plain, "", "1.1")):
            before = len(server.requests)
            config = write_config(server.url, f'{body}    tls_config {{\n      ca_file = "{pki.ca}"\n    }}\n')
            with running(config) as c:
                push(c, 2)
                assert wait_for(lambda: len(server.requests) >= before + 2), (server.url, body, server.requests)
            got = server.requests[before:]
            assert [r["http_version"] for r in got] == [version, version], (server.url, body, got)
            assert all(r["path"] == PATH and r["headers"]["content-type"] == "application/proto" for r in got)
            assert all(r["request"].series[0].samples[0].raw_profile == b"not-a-real-pprof" for r in got)
    finally:
        tls.close()
        plain.close()
