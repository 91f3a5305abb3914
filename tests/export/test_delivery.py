"""The delivery queue: never blocks the producer, retries with backoff, flushes within a deadline."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from hotstack.export.delivery import Backoff, DeliveryQueue, PermanentError, RateLimitedLog

FAST = Backoff(min_s=0.01, max_s=0.05, max_retries=3)


@pytest.mark.shares
def test_offer_never_blocks_on_a_stuck_sender():
    release = threading.Event()
    q = DeliveryQueue("stuck", lambda item: release.wait(), capacity=4, backoff=FAST)
    start = time.monotonic()
    accepted = sum(q.offer(i, size=10) for i in range(1000))
    assert time.monotonic() - start < 0.5
    assert 4 <= accepted <= 5                       # the queue, plus the one the sender holds
    assert q.metrics.snapshot()["dropped_items"] == 1000 - accepted
    release.set()
    assert q.close(5)
    assert q.metrics.snapshot()["sent_items"] == accepted


def _failing_sender(error: Exception):
    """A sender that raises `error` at each item, and the list of the items it was given."""
    calls = []

    def send(item):
        calls.append(item)
        raise error
    return send, calls


def test_retries_then_gives_up_and_counts():
    send, calls = _failing_sender(ConnectionError("receiver down"))
    q = DeliveryQueue("down", send, backoff=FAST)
    q.offer("a", size=3)
    end = time.monotonic() + 5
    while q.metrics.snapshot()["dropped_items"] == 0 and time.monotonic() < end:
        time.sleep(0.01)      # retries happen while running; a stop gives one try, no retries
    assert q.close(5)
    m = q.metrics.snapshot()
    assert len(calls) == 4 and m["retries"] == 3 and m["errors"] == 4 and m["dropped_items"] == 1
    assert m["dropped_bytes"] == 3


def test_permanent_errors_are_not_retried():
    send, calls = _failing_sender(PermanentError("400 bad request"))
    q = DeliveryQueue("refused", send, backoff=FAST)
    q.offer("a")
    q.close(5)
    assert len(calls) == 1 and q.metrics.snapshot()["dropped_items"] == 1


@pytest.mark.shares
def test_flush_on_close_within_the_deadline():
    sent = []
    q = DeliveryQueue("slow", lambda item: (time.sleep(0.05), sent.append(item)), capacity=100)
    for i in range(5):
        q.offer(i)
    assert q.close(3) and sent == [0, 1, 2, 3, 4]
    slow = DeliveryQueue("slower", lambda item: time.sleep(0.2), capacity=100)
    for i in range(20):
        slow.offer(i)
    start = time.monotonic()
    assert not slow.close(0.5)
    assert time.monotonic() - start < 1.0
    m = slow.metrics.snapshot()
    assert m["sent_items"] + m["dropped_items"] >= 19 and m["dropped_items"] >= 15


@pytest.mark.shares
def test_long_backoff_is_cut_by_the_shutdown_deadline():
    q = DeliveryQueue("backoff", lambda item: (_ for _ in ()).throw(TimeoutError("slow")),
                      backoff=Backoff(min_s=60, max_s=60, max_retries=0))
    q.offer("a")
    time.sleep(0.1)
    start = time.monotonic()
    q.close(0.3)
    assert time.monotonic() - start < 1.0
    assert q.metrics.snapshot()["dropped_items"] == 1


def test_backoff_grows_and_is_capped():
    b = Backoff(min_s=0.5, max_s=4, max_retries=10)
    delays = [b.delay(i) for i in range(8)]
    assert 0.25 <= delays[0] <= 0.5 and 2 <= delays[3] <= 4 and all(d <= 4 for d in delays)
    assert not b.gives_up_after(9) and b.gives_up_after(10)
    assert not Backoff(max_retries=0).gives_up_after(10**6)


def test_drop_log_is_rate_limited(caplog):
    log = RateLimitedLog(logging.getLogger("hotstack.test"), interval_s=0.2)
    with caplog.at_level(logging.WARNING, logger="hotstack.test"):
        for _ in range(100):
            log.warning("dropped")
        time.sleep(0.25)
        log.warning("dropped again")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["dropped", "dropped again (99 similar messages suppressed)"]


# -- issue 18: failures heard at once, memory bounded in bytes, stops within the deadline ----------
MIB = 1 << 20


def test_queue_is_bounded_in_bytes_and_drops_are_counted_at_once():
    """Items and bytes: big profiles are refused past `max_bytes` (queued plus in flight)."""
    release = threading.Event()
    q = DeliveryQueue("big", lambda item: release.wait(), capacity=64, max_bytes=4 * MIB, backoff=FAST)
    accepted = [q.offer(bytes(MIB), size=MIB) for _ in range(20)]
    assert sum(accepted) == 4 and q.held_bytes == 4 * MIB
    m = q.metrics.snapshot()
    assert m["dropped_items"] == 16 and m["dropped_bytes"] == 16 * MIB      # counted when dropped
    # One item larger than the whole budget is still taken when nothing else is held.
    release.set()
    assert q.close(5) and q.held_bytes == 0
    alone = DeliveryQueue("alone", lambda item: None, max_bytes=MIB)
    assert alone.offer(b"x", size=8 * MIB)
    assert alone.close(5) and alone.metrics.snapshot()["sent_items"] == 1


def test_first_failure_is_logged_at_once_escaped_then_rate_limited(caplog):
    garbage = "HTTP 500: \x1b[31mEVIL\x1b[0m\r\nInjected: line\x00\xff"

    def send(item):
        raise ConnectionError(garbage)

    with caplog.at_level(logging.WARNING, logger="hotstack.test.fail"):
        q = DeliveryQueue("ep", send, backoff=Backoff(min_s=0.05, max_s=0.05, max_retries=0),
                          logger=logging.getLogger("hotstack.test.fail"), log_interval_s=60)
        q.offer("a")
        end = time.monotonic() + 5
        while not caplog.records and time.monotonic() < end:
            time.sleep(0.01)
        first = time.monotonic()
        time.sleep(0.5)          # ~10 more failed attempts: held back, counted
        lines = [r.getMessage() for r in caplog.records]
        q.close(0.5)
    assert lines and first < end, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("ep: push failed: HTTP 500: \\x1b[31mEVIL\\x1b[0m\\r\\nInjected: line\\x00")
    assert all(c.isprintable() for c in lines[0]), lines[0]
    assert q.metrics.snapshot()["errors"] >= 5


def test_health_follows_the_receiver():
    answers = iter([ConnectionError("down"), ConnectionError("down"), None, None])
    events = []

    def send(item):
        a = next(answers)
        if a is not None:
            raise a

    q = DeliveryQueue("ep", send, backoff=Backoff(min_s=0.01, max_s=0.01, max_retries=0), on_health=events.append)
    q.offer("a")
    q.offer("b")
    end = time.monotonic() + 5
    while q.metrics.snapshot()["sent_items"] < 2 and time.monotonic() < end:
        time.sleep(0.01)
    assert q.close(1)
    assert events == ["down", ""] and q.failing == ""


def test_stop_with_a_failing_receiver_is_quick_and_says_what_was_dropped(caplog):
    """Issue 18 item 6: a stop waited out the whole deadline retrying a failing receiver."""
    def send(item):
        raise ConnectionError("connection refused")

    q = DeliveryQueue("ep", send, logger=logging.getLogger("hotstack.test.stop"))   # Alloy's backoff: 0.5 s ...
    for i in range(10):
        q.offer(i, size=100)
    time.sleep(0.1)
    with caplog.at_level(logging.WARNING, logger="hotstack.test.stop"):
        start = time.monotonic()
        q.close(3)
        took = time.monotonic() - start
    assert took < 0.5, took
    m = q.metrics.snapshot()
    assert m["dropped_items"] == 10 and m["dropped_bytes"] == 1000 and m["sent_items"] == 0
    said = [r.getMessage() for r in caplog.records if "flush deadline" in r.getMessage()]
    assert said == ["ep: stopped at shutdown (flush deadline 3.0s); dropped 10 profile(s) (1000 bytes): "
                    "the receiver is failing: connection refused"], said


def test_a_drop_at_shutdown_of_items_without_a_size_says_no_bytes(caplog):
    """The OTLP exporter offers its requests unencoded (no size): a stop said "dropped 1 profile(s)
    (0 bytes)" of a request that was not empty."""
    def send(item):
        raise ConnectionError("connection refused")

    q = DeliveryQueue("ep", send, logger=logging.getLogger("hotstack.test.nosize"))
    q.offer("request")
    time.sleep(0.1)
    with caplog.at_level(logging.WARNING, logger="hotstack.test.nosize"):
        q.close(3)
    said = [r.getMessage() for r in caplog.records if "flush deadline" in r.getMessage()]
    assert said == ["ep: stopped at shutdown (flush deadline 3.0s); dropped 1 profile(s): "
                    "the receiver is failing: connection refused"], said


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_hanging_attempt_is_cut_at_the_deadline(tls, tmp_path):
    """The attempt in flight ends at the deadline (its connection shut), not at remote_timeout;
    over TLS too (the TLS socket is the one to shut)."""
    from hotstack.export.pyroscope import PushSeries, PyroscopeEndpoint, PyroscopePusher

    from ..alloy.peers import make_pki
    from .connect_server import ConnectPushServer

    pki = make_pki(tmp_path) if tls else None
    server = ConnectPushServer(["hang"], hang_s=60, tls=pki.server_context(require_client_cert=False) if tls else None)
    pusher = PyroscopePusher(PyroscopeEndpoint(url=server.url, remote_timeout_s=30, tls_ca_file=pki.ca if tls else ""))
    try:
        pusher.push([PushSeries({"__name__": "process_cpu", "service_name": "s"}, b"p")])
        assert server.wait_for(1)
        start = time.monotonic()
        assert not pusher.close(1.0)
        took = time.monotonic() - start
        assert took < 1.8, took
        assert not pusher._queue._worker.is_alive()      # not left hanging for 30 s
        assert pusher.metrics.snapshot()["dropped_items"] == 1
    finally:
        server.close()
