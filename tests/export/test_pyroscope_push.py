"""Pyroscope push client against a test server that speaks Connect and decodes each PushRequest."""

from __future__ import annotations

import gzip
import logging
import time

import pytest

from hotstack.export.pyroscope import (PUSH_PATH, PushSeries, PyroscopeEndpoint, PyroscopePusher, series_labels,
                                       validate_labels)
from hotstack.profile.model import Frame, Profile, Sample
from hotstack.profile.pprof import encode_pprof

from .collectors import free_port
from .conftest import pprof
from .connect_server import ConnectPushServer
from .pprof_raw import parse_raw

LABELS = {"__name__": "process_cpu", "service_name": "ebpf/web", "namespace": "prod",
          "__container_id__": "c0ffee", "__meta_x": "dropped"}


def _pprof() -> bytes:
    f = Frame("work", module="/bin/app", address=0x10)
    return encode_pprof(Profile([Sample((f,), 4, 9, 9, "app")], 1_700_000_000_000_000_000, 15_000_000_000, 19))


def _handled(pusher: PyroscopePusher, items: int, timeout: float = 10.0) -> None:
    """Wait until `items` were sent or dropped: retries happen while running (a stop gives each
    queued item one try only, and none once the receiver fails)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = pusher.metrics.snapshot()
        if m["sent_items"] + m["dropped_items"] >= items:
            return
        time.sleep(0.02)
    raise AssertionError(f"not handled in {timeout}s: {pusher.metrics.snapshot()}")


def _endpoint(url: str, **kw) -> PyroscopeEndpoint:
    return PyroscopeEndpoint(url=url, min_backoff_s=0.05, max_backoff_s=0.2, **kw)


def test_push_is_a_connect_request_with_labels_and_the_gzipped_pprof(go_pprof, tmp_path):
    server = ConnectPushServer([200])
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    pusher = PyroscopePusher(_endpoint(server.url, headers={"X-Scope-OrgID": "tenant-1"}, bearer_token_file=str(token)))
    try:
        raw = _pprof()
        assert pusher.push([PushSeries(LABELS, raw)])
        assert pusher.close(5)
    finally:
        server.close()
    [record] = server.requests
    assert record["path"] == PUSH_PATH
    h = record["headers"]
    assert h["Content-Type"] == "application/proto" and h["Connect-Protocol-Version"] == "1"
    assert h["X-Scope-OrgID"] == "tenant-1" and h["Authorization"] == "Bearer s3cret"
    assert int(h["Connect-Timeout-Ms"]) == 10_000
    [series] = record["request"].series
    # `__`-prefixed labels are dropped except __name__, and the rest are sorted by name.
    assert [(l.name, l.value) for l in series.labels] == [
        ("__name__", "process_cpu"), ("namespace", "prod"), ("service_name", "ebpf/web")]
    [sample] = series.samples
    assert sample.raw_profile == raw and len(sample.ID) == 36
    path = tmp_path / "p.pb.gz"
    path.write_bytes(sample.raw_profile)
    parsed = parse_raw(pprof(go_pprof, "-raw", str(path)))
    assert parsed.sample_types == ["cpu/nanoseconds"] and parsed.samples[0]["values"] == [4 * (10**9 // 19)]
    m = pusher.metrics.snapshot()
    assert m["sent_items"] == 1 and m["sent_bytes"] == len(raw) and m["dropped_items"] == 0


def test_basic_auth():
    server = ConnectPushServer([200])
    pusher = PyroscopePusher(_endpoint(server.url, basic_auth_username="u", basic_auth_password="p"))
    try:
        pusher.push([PushSeries(LABELS, b"x")])
        pusher.close(5)
    finally:
        server.close()
    assert server.requests[0]["headers"]["Authorization"] == "Basic dTpw"


def test_503_then_200_is_retried():
    server = ConnectPushServer([503, 503, 200])
    pusher = PyroscopePusher(_endpoint(server.url))
    try:
        assert pusher.push([PushSeries(LABELS, b"profile")])
        _handled(pusher, 1)
        assert pusher.close(10)
    finally:
        server.close()
    assert [r["status"] for r in server.requests] == [503, 503, 200]
    m = pusher.metrics.snapshot()
    assert (m["sent_items"], m["retries"], m["errors"], m["dropped_items"]) == (1, 2, 2, 0)


def _push_one(statuses: list, **endpoint) -> tuple[dict, list]:
    """One series pushed to a server that answers `statuses` in turn, until sent or dropped, and
    the pusher closed: its metrics and the server's requests."""
    server = ConnectPushServer(statuses)
    pusher = PyroscopePusher(_endpoint(server.url, **endpoint))
    try:
        pusher.push([PushSeries(LABELS, b"p")])
        _handled(pusher, 1)
        pusher.close(5)
    finally:
        server.close()
    return pusher.metrics.snapshot(), server.requests


def test_429_is_retried_only_when_enabled():
    off, requests = _push_one([429, 200], retry_on_http_429=False)
    assert off["dropped_items"] == 1 and len(requests) == 1
    on, requests = _push_one([429, 200])
    assert on["sent_items"] == 1 and len(requests) == 2


def test_400_is_not_retried():
    m, requests = _push_one([400, 200])
    assert len(requests) == 1 and m["dropped_items"] == 1


def test_a_refusal_at_shutdown_is_said_as_a_refusal(caplog):
    """Issue 47 item 13: a receiver that answered 400 at once to the one push made at shutdown was
    reported as one that "did not answer in time"."""
    server = ConnectPushServer([400], error_body=b'{"code":"invalid_argument","message":"bad labels"}')
    pusher = PyroscopePusher(_endpoint(server.url), logger=logging.getLogger("hotstack.test.refusal"))
    try:
        with caplog.at_level(logging.WARNING, logger="hotstack.test.refusal"):
            pusher.push([PushSeries(LABELS, b"p")])
            pusher.close(5)
    finally:
        server.close()
    said = [r.getMessage() for r in caplog.records if "stopped at shutdown" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith("refused by the receiver: POST "
                                               f"{server.url}{PUSH_PATH}: HTTP 400: invalid_argument: bad labels"), said


@pytest.mark.shares
def test_hanging_server_times_out_and_push_never_blocks():
    server = ConnectPushServer(["hang"], hang_s=10)
    pusher = PyroscopePusher(_endpoint(server.url, remote_timeout_s=0.3, max_backoff_retries=1), queue_size=2)
    try:
        start = time.monotonic()
        results = [pusher.push([PushSeries(LABELS, b"p")]) for _ in range(10)]
        assert time.monotonic() - start < 0.5          # enqueue only, whatever the server does
        assert results[:2] == [True, True] and not all(results)
        assert server.wait_for(2, timeout=5)           # the first attempt timed out and was retried
        pusher.close(3)
    finally:
        server.close()
    m = pusher.metrics.snapshot()
    assert m["sent_items"] == 0 and m["dropped_items"] == 10 and m["errors"] >= 2


def test_server_down_counts_drops_and_does_not_crash():
    url = f"http://127.0.0.1:{free_port()}"       # nothing listens there
    pusher = PyroscopePusher(_endpoint(url, max_backoff_retries=2))
    for _ in range(3):
        pusher.push([PushSeries(LABELS, b"p")])
    _handled(pusher, 3)
    start = time.monotonic()
    pusher.close(5)
    assert time.monotonic() - start < 5
    m = pusher.metrics.snapshot()
    assert m["dropped_items"] == 3 and m["sent_items"] == 0 and m["errors"] == 9   # 3 tries each


@pytest.mark.shares
def test_shutdown_deadline_drops_what_is_left():
    server = ConnectPushServer(["hang"], hang_s=10)
    pusher = PyroscopePusher(_endpoint(server.url, remote_timeout_s=5))
    for _ in range(4):
        pusher.push([PushSeries(LABELS, b"p")])
    start = time.monotonic()
    done = pusher.close(0.5)
    assert time.monotonic() - start < 1.5 and not done
    server.close()
    assert pusher.metrics.snapshot()["dropped_items"] >= 3


def test_label_validation_as_pyroscope():
    assert validate_labels(series_labels(LABELS)) is None
    assert "service_name" in validate_labels(series_labels({"__name__": "process_cpu"}))
    assert "__name__" in validate_labels(series_labels({"service_name": "a"}))
    assert "invalid label name" in validate_labels(series_labels({**LABELS, "bad-name": "x"}))
    assert validate_labels(series_labels({**LABELS, "k8s.pod.name": "x"})) is None   # dots are allowed
    assert "longer" in validate_labels(series_labels({**LABELS, "v": "x" * 3000}))
    server = ConnectPushServer([200])
    pusher = PyroscopePusher(_endpoint(server.url))
    try:
        assert not pusher.push([PushSeries({"service_name": "a"}, b"p")])
        pusher.close(2)
    finally:
        server.close()
    assert server.requests == [] and pusher.metrics.snapshot()["dropped_items"] == 1


def test_gzip_raw_profile_is_sent_as_given():
    raw = gzip.compress(b"\x0a\x00")
    server = ConnectPushServer([200])
    pusher = PyroscopePusher(_endpoint(server.url))
    try:
        pusher.push([PushSeries(LABELS, raw), PushSeries({**LABELS, "service_name": "b"}, raw)])
        pusher.close(5)
    finally:
        server.close()
    [request] = server.accepted()
    assert len(request.series) == 2 and all(s.samples[0].raw_profile == raw for s in request.series)


def test_memory_is_bounded_in_bytes_against_a_hanging_receiver():
    """Issue 18 item 5: RSS grew while the endpoint hung. 50 pushes/s of 2 MiB profiles for 30 s
    (3 GiB offered) to a receiver that never answers: the pusher holds at most its byte budget
    (16 MiB) whatever the item count, RSS stays flat after the first seconds, drops are counted."""
    import json
    import subprocess
    import sys

    budget_kib = 16 << 10          # export.delivery.DEFAULT_QUEUE_BYTES
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "tests.export.push_memory", "--seconds", "30", "--rate", "50",
                        "--profile-kib", "2048"], capture_output=True, text=True, timeout=180, cwd=root)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    baseline = rows[0]["rss_kib"]
    samples = [row for row in rows[1:] if "rss_kib" in row]
    assert len(samples) >= 25, rows
    peak = max(s["rss_kib"] for s in samples)
    # The budget, one item in flight plus its encoded copy, and allocator slack.
    assert peak - baseline < budget_kib + 3 * 2048 + 16 * 1024, (baseline, peak, samples)
    after_warmup = [s["rss_kib"] for s in samples if s["t"] >= 5]
    assert max(after_warmup) - min(after_warmup) < 12 * 1024, after_warmup          # flat
    assert all(s["held_kib"] <= budget_kib for s in samples)
    assert samples[-1]["dropped"] > 1000 and rows[-1]["closed_in_s"] < 2.0, rows[-1]


def _series(n: int) -> list[PushSeries]:
    return [PushSeries({**LABELS, "service_name": f"svc-{i}"}, _pprof()) for i in range(n)]


def _services(requests) -> list[list[str]]:
    return [[{lp.name: lp.value for lp in s.labels}["service_name"] for s in r.series] for r in requests]


def test_an_intervals_profiles_go_in_one_request_split_by_batch_limits(monkeypatch):
    """push_many (pyroscope.ebpf's profiles of one interval, one per target): one PushRequest for
    them all, not a request each (~1 ms of client CPU each), cut at BATCH_SERIES / BATCH_BYTES."""
    import hotstack.export.pyroscope as pyroscope
    server = ConnectPushServer([200])
    pusher = PyroscopePusher(_endpoint(server.url))
    try:
        assert pusher.push_many(_series(3)) == [True, True, True]
        _handled(pusher, 3)
        monkeypatch.setattr(pyroscope, "BATCH_SERIES", 2)
        assert pusher.push_many(_series(3)) == [True, True, True]
        _handled(pusher, 6)
        assert pusher.close(5)
    finally:
        server.close()
    assert _services(server.accepted()) == [["svc-0", "svc-1", "svc-2"], ["svc-0", "svc-1"], ["svc-2"]]
    m = pusher.metrics.snapshot()
    assert (m["sent_items"], m["dropped_items"]) == (6, 0), m


def _three_series_pushed(responses: list) -> tuple[ConnectPushServer, PyroscopePusher]:
    """Three series pushed together to a receiver answering `responses` in turn (4xx ones refuse
    for good), until all are sent or dropped; the pusher closed."""
    server = ConnectPushServer(responses, error_body=b'{"code":"invalid_argument","message":"bad series"}')
    pusher = PyroscopePusher(_endpoint(server.url))
    try:
        assert all(pusher.push_many(_series(3)))
        _handled(pusher, 3)
        assert pusher.close(5)
    finally:
        server.close()
    return server, pusher


def test_a_request_refused_for_one_series_loses_only_that_one():
    """The receiver refuses a whole request for one bad series (HTTP 400): each series is sent again
    on its own, and only the refused one is dropped and counted."""
    server, pusher = _three_series_pushed([400, 200, 400, 200])
    assert [r["status"] for r in server.requests] == [400, 200, 400, 200]
    assert _services(server.accepted()) == [["svc-0"], ["svc-2"]]
    m = pusher.metrics.snapshot()
    assert (m["sent_items"], m["dropped_items"]) == (2, 1), m


def test_a_receiver_failing_while_a_refused_request_is_sent_apart_sends_nothing_twice():
    """Sent apart after a refusal, the receiver fails (503) at the second series: that one and the
    rest are queued again on their own (retried), the first is not sent again."""
    server, pusher = _three_series_pushed([400, 200, 503, 200, 200])
    assert sorted(s for r in _services(server.accepted()) for s in r) == ["svc-0", "svc-1", "svc-2"]
    m = pusher.metrics.snapshot()
    assert (m["sent_items"], m["dropped_items"]) == (3, 0), m
