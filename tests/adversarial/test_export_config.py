"""Export settings that passed the config check and then failed at every export (issue 47 item 13):
an OTLP ca-file that holds no certificate, an endpoint that is a URL or has a space, a
remote_timeout longer than a push can carry. Each is one line at start naming the key, exit 2."""

from __future__ import annotations

import subprocess

import pytest

from hotstack.export.otlp_grpc import OtlpGrpcConfig

from .conftest import assert_one_line

CONFIG = """\
operator:
  otel-profiles:
    exporters:
      a:
        exporter: otlp-grpc
        endpoint: "{endpoint}"
{extra}"""


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    """A self-signed certificate and its private key (openssl, as the OTLP TLS tests)."""
    d = tmp_path_factory.mktemp("pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "key.pem"),
                    "-out", str(d / "cert.pem"), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    (d / "garbage.pem").write_bytes(bytes(range(256)) * 4)
    return d


def run(cli, tmp_path, endpoint: str, extra: str):
    path = tmp_path / "ig-config.yaml"
    path.write_text(CONFIG.format(endpoint=endpoint, extra=extra))
    return cli("run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "1", "-o", "none",
               "--config", str(path), "--otel-profiles-exporter", "a")


@pytest.mark.parametrize("name", ["key.pem", "garbage.pem"])
def test_ca_file_without_a_certificate(cli, tmp_path, pem, name):
    """It passed, then gRPC printed its own lines (`Cannot load server root certificates`) at each export."""
    r = run(cli, tmp_path, "127.0.0.1:4317", f"        ca-file: {pem / name}\n")
    assert_one_line(r, f"ca-file '{pem / name}': no PEM certificate in it")


def test_ca_file_with_a_certificate_is_taken(pem):
    OtlpGrpcConfig("a", "127.0.0.1:4317", ca_file=str(pem / "cert.pem")).validate()


@pytest.mark.parametrize("endpoint, fragment", [
    ("http://127.0.0.1:4317", "without a scheme"),
    ("https://collector:4317", "without a scheme"),
    (" 127.0.0.1:4317", "without spaces"),
    ("127.0.0.1:4317 ", "without spaces"),
    ("coll ector:4317", "without spaces"),
    ("bad/name:4317", "'bad/name' is not a host name"),
    ("[::zz]:4317", "[::zz] is not an IPv6 address"),
])
def test_endpoint_that_is_not_host_port(cli, tmp_path, endpoint, fragment):
    """It passed, then every export failed as "Misformatted domain name"."""
    r = run(cli, tmp_path, endpoint, "        insecure: true\n")
    assert_one_line(r, f"endpoint {endpoint!r}", fragment)


@pytest.mark.parametrize("endpoint", ["127.0.0.1:4317", "collector.observability.svc:4317", "localhost:4317",
                                      "[::1]:4317", "otel_collector:4317"])
def test_host_port_endpoints_are_taken(endpoint):
    OtlpGrpcConfig("a", endpoint, insecure=True).validate()


def test_remote_timeout_longer_than_a_push_can_carry(cli, tmp_path):
    """`remote_timeout = "9999999h"` passed --validate, then every push failed."""
    path = tmp_path / "agent.alloy"
    path.write_text('pyroscope.write "w" {\n  endpoint {\n    url = "http://127.0.0.1:4040"\n'
                    '    remote_timeout = "9999999h"\n  }\n}\n')
    assert_one_line(cli("agent", "--validate", str(path)), "remote_timeout", "longer than the Connect protocol's limit")
