"""The delivery queue: never blocks the producer, retries with backoff, flushes within a deadline."""

from __future__ import annotations

import logging
import threading
import time

from hotstack.export.delivery import Backoff, DeliveryQueue, PermanentError, RateLimitedLog

FAST = Backoff(min_s=0.01, max_s=0.05, max_retries=3)


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


def test_retries_then_gives_up_and_counts():
    calls = []

    def send(item):
        calls.append(item)
        raise ConnectionError("receiver down")

    q = DeliveryQueue("down", send, backoff=FAST)
    q.offer("a", size=3)
    assert q.close(5)
    m = q.metrics.snapshot()
    assert len(calls) == 4 and m["retries"] == 3 and m["errors"] == 4 and m["dropped_items"] == 1
    assert m["dropped_bytes"] == 3


def test_permanent_errors_are_not_retried():
    calls = []

    def send(item):
        calls.append(item)
        raise PermanentError("400 bad request")

    q = DeliveryQueue("refused", send, backoff=FAST)
    q.offer("a")
    q.close(5)
    assert len(calls) == 1 and q.metrics.snapshot()["dropped_items"] == 1


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
