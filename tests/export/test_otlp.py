"""OTLP profiles export of real runs, decoded by the Python receiver built on the official
opentelemetry-proto package (layout v1.10), independently of hotstack's own modules."""

from __future__ import annotations

import subprocess
import time

import pytest

from hotstack.profile.otlp import encode_profile
from hotstack.profile.model import Frame, FrameKind, Profile, Sample

from ..conftest import hotstack
from .collectors import free_port
from .conftest import pprof
from .otlp_checks import check_dictionary, profile_types
from .otlp_receiver import OfficialReceiver, resolve
from .pprof_raw import parse_raw

HZ = 99
PERIOD = 10**9 // HZ

# The official package's receiver speaks the v1.10 layout: the line a newer receiver needs.
CONFIG = """\
operator:
  otel-profiles:
    exporters:
      test:
        exporter: otlp-grpc
        compression: {compression}
        endpoint: "{endpoint}"
        insecure: true
        protocol-version: v1.10
"""


@pytest.fixture
def receiver():
    r = OfficialReceiver()
    yield r
    r.stop()


def write_config(tmp_path, endpoint: str, compression: str = "gzip", extra: str = "") -> str:
    path = tmp_path / "ig-config.yaml"
    path.write_text(CONFIG.format(endpoint=endpoint, compression=compression) + extra)
    return str(path)


def workload_samples(requests, comm: str) -> list[dict]:
    return [s for req in requests for s in resolve(req) if s["attributes"].get("proc.comm") == comm]


@pytest.mark.root
@pytest.mark.parametrize("compression", ["gzip", "none"])
@pytest.mark.shares
def test_export_of_a_run_decodes_with_the_official_package(export_busy, workloads, receiver, tmp_path, go_pprof,
                                                           compression):
    w = workloads([export_busy])
    pb = tmp_path / "same-run.pb.gz"
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "3", "--sample-rate", str(HZ),
                 "--config", write_config(tmp_path, receiver.endpoint, compression),
                 "--otel-profiles-exporter", "test", "-o", "pprof", "--file", str(pb))
    assert r.returncode == 0, r.stderr
    requests = receiver.wait_for(1)
    assert len(requests) == 1, "one export per fetch (--map-fetch-interval 0: one at the end)"
    request = requests[0]
    check_dictionary(request)
    assert profile_types(request) == (("samples", "count"), ("cpu", "nanoseconds"), PERIOD)
    samples = resolve(request)
    assert samples and all(s["attributes"] == {"proc.comm": "export_busy"} for s in samples)
    assert samples[0]["resource"]["service.name"] == "hotstack" and samples[0]["resource"]["service.version"]
    profile = samples[0]["profile"]
    assert profile.time_unix_nano > 1_600_000_000 * 10**9 and profile.duration_nano > 2 * 10**9
    leaf = [s for s in samples if s["frames"][:3] == ["export_leaf", "export_outer", "main"]]
    assert leaf and sum(s["value"] for s in leaf) >= 0.3 * sum(s["value"] for s in samples)
    assert any("__x64_sys_getppid" in s["frames"] for s in samples)
    strings = set(request.dictionary.string_table)
    assert str(export_busy) in strings                              # the mapping's file
    assert "process.executable.build_id.gnu" in strings and "profile.frame.type" in strings
    # The same run written as pprof counts exactly the same samples.
    raw = parse_raw(pprof(go_pprof, "-raw", str(pb)))
    assert sum(s["value"] for s in samples) == sum(s["values"][0] for s in raw.samples) // PERIOD


@pytest.mark.root
def test_one_export_per_interval_and_none_when_empty(export_busy, workloads, receiver, tmp_path):
    busy = workloads([export_busy])
    idle = workloads(["sleep", "100"])
    config = write_config(tmp_path, receiver.endpoint)
    r = hotstack("run", "profile_cpu", "--pid", str(busy.pid), "--timeout", "3.5", "--map-fetch-interval", "1s",
                 "--config", config, "--otel-profiles-exporter", "samples:test", "-o", "none")
    assert r.returncode == 0, r.stderr
    requests = receiver.wait_for(3)
    assert len(requests) >= 3, len(requests)
    starts = [req.resource_profiles[0].scope_profiles[0].profiles[0].time_unix_nano for req in requests]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert all(workload_samples([req], "export_busy") for req in requests)
    before = len(receiver.requests)
    r = hotstack("run", "profile_cpu", "--pid", str(idle.pid), "--timeout", "2", "--map-fetch-interval", "500ms",
                 "--config", config, "--otel-profiles-exporter", "test", "-o", "none")
    assert r.returncode == 0, r.stderr
    time.sleep(0.5)
    assert len(receiver.requests) == before, "an interval without samples sends nothing"


@pytest.mark.root
@pytest.mark.shares
def test_absent_receiver_does_not_hold_up_the_run(export_busy, workloads, tmp_path):
    w = workloads([export_busy])
    args = ["run", "profile_cpu", "--pid", str(w.pid), "--timeout", "2", "--map-fetch-interval", "500ms", "-o", "folded"]
    start = time.monotonic()
    assert hotstack(*args).returncode == 0
    baseline = time.monotonic() - start
    config = write_config(tmp_path, f"127.0.0.1:{free_port()}")
    start = time.monotonic()
    r = hotstack(*args, "--config", config, "--otel-profiles-exporter", "test")
    elapsed = time.monotonic() - start
    assert r.returncode == 0, r.stderr
    assert "export_leaf" in r.stdout                 # sampling and output went on
    assert "dropped" in r.stderr and "Traceback" not in r.stderr
    # At most the flush deadline (5 s) more than the same run without the exporter.
    assert elapsed < baseline + 5 + 3, (elapsed, baseline)


class _HangingReceiver:
    """Accepts TCP connections and reads, never answers: an HTTP/2 peer that hangs."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)     # held open, never answered

    def close(self) -> None:
        self.sock.close()
        for c in self.connections:
            c.close()


def test_hanging_receiver_is_cut_at_the_flush_deadline(tmp_path):
    """Issue 18 item 6: an OTLP export to a hanging receiver made a run end 6 s late (a 5 s wait,
    the call itself left hanging). Closing the run's exports now takes the 3 s flush deadline, cuts
    the call in flight, and says what was dropped."""
    from hotstack.gadget.exports import RunExports
    from hotstack.gadget.profile_cpu import samples_datasource

    hang = _HangingReceiver()
    try:
        exports = RunExports(samples_datasource(HZ), config=write_config(tmp_path, hang.endpoint),
                             exporter_flag="test", sanitize=False)
        p = Profile([Sample((Frame("spin"),), 3, 1, 1, "app")], 1, 2, HZ)
        for _ in range(3):
            exports.emit(p)
        deadline = time.monotonic() + 10
        while not hang.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hang.connections, "the exporter never connected"
        time.sleep(0.5)
        start = time.monotonic()
        exports.close()
        took = time.monotonic() - start
        [exporter] = exports.exporters
    finally:
        hang.close()
    assert took < 3.0 + 0.8, took          # export.delivery.FLUSH_DEADLINE_S
    assert not exporter._queue._worker.is_alive()          # the hanging call was cut
    m = exporter.metrics.snapshot()
    assert m["dropped_items"] == 3 and m["sent_items"] == 0, m


def test_every_layout_encodes_the_same_samples():
    """v1.8 and v1.9 requests decode with hotstack's modules to the same samples as v1.10 with the
    official package: only field numbers differ."""
    from hotstack.profile.otlp.encode import MODULES
    from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import \
        ExportProfilesServiceRequest

    k = Frame("do_syscall_64", FrameKind.KERNEL, "[kernel.kallsyms]", 0xffffffff81000000)
    a = Frame("spin", FrameKind.NATIVE, "/bin/app", 0x1139, "ab" * 20)
    b = Frame("main", FrameKind.NATIVE, "/bin/app", 0x1160, "ab" * 20)
    p = Profile([Sample((k, a, b), 10, 1, 1, "app"), Sample((a, b), 5, 1, 2, "app"), Sample((a, b), 2, 1, 3, "app")],
                1, 2, 49)
    official = ExportProfilesServiceRequest.FromString(encode_profile(p, "v1.10"))
    check_dictionary(official)
    expected = sorted((s["frames"], s["value"], tuple(s["attributes"].items())) for s in resolve(official))
    assert expected == [(["do_syscall_64", "spin", "main"], 10, (("proc.comm", "app"),)),
                        (["spin", "main"], 7, (("proc.comm", "app"),))]   # equal identities merged
    for version in ("v1.8", "v1.9"):
        req = MODULES[version].ExportProfilesServiceRequest.FromString(encode_profile(p, version))
        check_dictionary(req)
        assert sorted((s["frames"], s["value"], tuple(s["attributes"].items())) for s in resolve(req)) == expected
        # Read with the v1.10 layout, a v1.8/v1.9 sample's values land in the wrong fields.
        misread = ExportProfilesServiceRequest.FromString(encode_profile(p, version))
        assert [list(s.values) for s in misread.resource_profiles[0].scope_profiles[0].profiles[0].samples] != \
               [[10], [7]]


@pytest.mark.parametrize("version", ["v1.8", "v1.9"])
def test_older_layouts_decoded_by_their_own_collector(version, tmp_path):
    """v1.8 and v1.9 requests as the real collector of each layout decodes them (its debug output),
    not through hotstack's own .proto files: values, attributes and function names where we put them."""
    from .collectors import debug_dictionary, debug_samples, decode_with_collector

    k = Frame("do_syscall_64", FrameKind.KERNEL, "[kernel.kallsyms]", 0xffffffff81000000)
    a = Frame("spin", FrameKind.NATIVE, "/bin/app", 0x1139, "ab" * 20)
    b = Frame("main", FrameKind.NATIVE, "/bin/app", 0x1160, "ab" * 20)
    p = Profile([Sample((k, a, b), 10, 1, 1, "app"), Sample((a, b), 5, 1, 2, "app"),
                 Sample((a, b), 2, 1, 3, "other")], 1, 2, 49)
    out = decode_with_collector(version, encode_profile(p, version), tmp_path / version)
    samples = sorted((s["values"], sorted(s["attributes"].items())) for s in debug_samples(out))
    assert samples == [([2], [("proc.comm", "other")]), ([5], [("proc.comm", "app")]),
                       ([10], [("proc.comm", "app")])], out[-3000:]
    d = debug_dictionary(out)
    assert {"do_syscall_64", "spin", "main"} <= set(d["functions"]), d
    assert {"/bin/app", "[kernel.kallsyms]", "samples", "count", "cpu", "nanoseconds"} <= set(d["strings"]), d


def _self_signed(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return key, cert


def _export_once(cfg) -> dict:
    from hotstack.export.otlp_grpc import OtlpProfilesExporter

    exporter = OtlpProfilesExporter(cfg)
    p = Profile([Sample((Frame("spin"),), 3, 1, 1, "app")], 1, 2, 49)
    exporter.export(lambda version: encode_profile(p, version))
    exporter.close(3)
    return exporter.metrics.snapshot()


def test_tls_with_a_ca_file_and_without_it(tmp_path):
    from hotstack.export.otlp_grpc import OtlpGrpcConfig

    key, cert = _self_signed(tmp_path)
    receiver = OfficialReceiver(tls=(key.read_bytes(), cert.read_bytes()))
    try:
        fast = dict(min_backoff_s=0.05, max_backoff_s=0.1, max_retries=1, timeout_s=2)
        # insecure: false and our CA: TLS handshake, request decoded.
        m = _export_once(OtlpGrpcConfig("tls", receiver.endpoint, ca_file=str(cert), **fast))
        assert m["sent_items"] == 1 and len(receiver.wait_for(1)) == 1
        # The system's roots do not know this certificate: refused, counted, no crash.
        m = _export_once(OtlpGrpcConfig("tls", receiver.endpoint, **fast))
        assert m["sent_items"] == 0 and m["dropped_items"] == 1
        # Plaintext to a TLS server fails the same way.
        m = _export_once(OtlpGrpcConfig("plain", receiver.endpoint, insecure=True, **fast))
        assert m["dropped_items"] == 1
        assert len(receiver.requests) == 1
    finally:
        receiver.stop()


class _CountingRelay:
    """A TCP relay on loopback that counts the bytes the client sends (HTTP/2 frames, as on the wire)."""

    def __init__(self, target_port: int) -> None:
        import socket
        import threading

        self.sent = 0
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._target = target_port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self._target))
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src, dst, count: bool) -> None:
        try:
            while data := src.recv(65536):
                if count:
                    with self._lock:
                        self.sent += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


def test_gzip_compression_is_on_the_wire():
    from hotstack.export.otlp_grpc import OtlpGrpcConfig, OtlpProfilesExporter

    frames = [Frame(f"function_number_{i}", module="/usr/lib/libexample.so", address=0x1000 + 16 * i) for i in range(400)]
    p = Profile([Sample(tuple(frames[i:i + 40]), 1 + i % 7, 1, 1, "app") for i in range(300)], 1, 2, 49)
    receiver = OfficialReceiver()
    sizes = {}
    try:
        for compression in ("none", "gzip"):
            relay = _CountingRelay(receiver.port)
            exporter = OtlpProfilesExporter(OtlpGrpcConfig("c", f"127.0.0.1:{relay.port}", insecure=True,
                                                           compression=compression))
            exporter.export(lambda version: encode_profile(p, version))
            exporter.close(5)
            relay.close()
            sizes[compression] = relay.sent
        requests = receiver.wait_for(2)
        assert len(requests) == 2 and requests[0] == requests[1]     # the same request, decoded both times
    finally:
        receiver.stop()
    body = len(encode_profile(p))
    assert sizes["none"] > body                       # the whole request crossed uncompressed
    assert sizes["gzip"] < 0.6 * sizes["none"], sizes
