"""Delivery that never hurts sampling: a bounded queue per exporter, drained by its own thread.

The producer (the sampling loop) only ever calls `offer()`, which never blocks: when the queue is
full, the item is dropped, counted and logged (rate-limited). The worker sends each item with
retries and exponential backoff; a failure that retrying cannot fix drops the item. On shutdown,
`close(deadline_s)` keeps sending what is queued until the deadline, then drops the rest.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("hotstack.export")


class RetryableError(Exception):
    """The send failed in a way that may pass on a later try (timeout, 5xx, unavailable...)."""


class PermanentError(Exception):
    """The receiver refused the item; sending it again would fail the same way."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: min, 2*min, 4*min ... capped at max.
    `max_retries` = 0 retries forever (until shutdown), as Alloy's `max_backoff_retries`."""

    min_s: float = 0.5
    max_s: float = 300.0
    max_retries: int = 10

    def delay(self, attempt: int) -> float:
        base = min(self.max_s, self.min_s * (2 ** min(attempt, 32)))
        # Full jitter in the upper half: receivers recovering from an outage are not hit in step.
        return base * (0.5 + random.random() / 2)

    def gives_up_after(self, retries: int) -> bool:
        return self.max_retries > 0 and retries >= self.max_retries


@dataclass
class DeliveryMetrics:
    """Counters of one exporter, with the meanings of Alloy's `pyroscope_write_*` metrics:
    sent = accepted by the receiver; dropped = given up (queue full, refused, retries exhausted,
    shutdown); errors = failed attempts; retries = attempts after the first."""

    sent_items: int = 0
    sent_bytes: int = 0
    dropped_items: int = 0
    dropped_bytes: int = 0
    errors: int = 0
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {name: getattr(self, name) for name in
                    ("sent_items", "sent_bytes", "dropped_items", "dropped_bytes", "errors", "retries")}


class RateLimitedLog:
    """At most one line per `interval_s` per exporter; what was held back is counted in the next line."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last = float("-inf")
        self._held = 0
        self._lock = threading.Lock()

    def warning(self, message: str) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last < self.interval_s:
                self._held += 1
                return
            held, self._held, self._last = self._held, 0, now
        suffix = f" ({held} similar messages suppressed)" if held else ""
        self.logger.warning("%s%s", message, suffix)


@dataclass
class _Item(Generic[T]):
    payload: T
    size: int
    count: int


class DeliveryQueue(Generic[T]):
    """One bounded queue and one sender thread for one exporter."""

    def __init__(self, name: str, send: Callable[[T], int | None], *, capacity: int = 64,
                 backoff: Backoff = Backoff(), metrics: DeliveryMetrics | None = None,
                 logger: logging.Logger = log, log_interval_s: float = 10.0) -> None:
        self.name = name
        self._send = send
        self._queue: queue.Queue[_Item[T] | None] = queue.Queue(maxsize=capacity)
        self.backoff = backoff
        self.metrics = metrics or DeliveryMetrics()
        self.log = RateLimitedLog(logger, log_interval_s)
        self._closing = threading.Event()   # no new items; retry waits end early
        self._deadline: float | None = None
        self._worker = threading.Thread(target=self._run, name=f"hotstack-export-{name}", daemon=True)
        self._worker.start()

    def offer(self, payload: T, size: int = 0, count: int = 1) -> bool:
        """Queue an item without ever blocking. False: dropped (queue full or closed), and counted."""
        if self._closing.is_set():
            self._drop(size, count, "exporter is shutting down")
            return False
        try:
            self._queue.put_nowait(_Item(payload, size, count))
            return True
        except queue.Full:
            self._drop(size, count, f"queue full ({self._queue.maxsize} pending): the receiver is slower "
                                    f"than the profiler")
            return False

    def _drop(self, size: int, count: int, why: str) -> None:
        self.metrics.add(dropped_items=count, dropped_bytes=size)
        self.log.warning(f"{self.name}: dropped {count} profile(s): {why}")

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._past_deadline():
                self._drop(item.size, item.count, "shutdown deadline passed before it could be sent")
                continue
            self._deliver(item)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _deliver(self, item: _Item[T]) -> None:
        retries = 0
        while True:
            try:
                sent = self._send(item.payload)
            except PermanentError as e:
                self.metrics.add(errors=1)
                self._drop(item.size, item.count, f"refused by the receiver: {e}")
                return
            except Exception as e:  # noqa: BLE001 - any other failure is worth another try
                self.metrics.add(errors=1)
                if self.backoff.gives_up_after(retries):
                    self._drop(item.size, item.count, f"{e} (gave up after {retries} retries)")
                    return
                if not self._wait_backoff(self.backoff.delay(retries)):
                    self._drop(item.size, item.count, f"{e} (shutdown deadline passed while retrying)")
                    return
                retries += 1
                self.metrics.add(retries=1)
                continue
            # A sender that encodes lazily returns the size it put on the wire.
            self.metrics.add(sent_items=item.count, sent_bytes=sent if isinstance(sent, int) else item.size)
            return

    def _wait_backoff(self, delay: float) -> bool:
        """Sleep before the next try; False when the shutdown deadline would pass first."""
        end = time.monotonic() + delay
        if not self._closing.is_set():
            self._closing.wait(delay)          # close() wakes us to re-check against its deadline
        if self._deadline is not None:
            if end >= self._deadline:
                return False
            time.sleep(max(0.0, end - time.monotonic()))
        return True

    def pending(self) -> int:
        return self._queue.qsize()

    def close(self, deadline_s: float = 5.0) -> bool:
        """Send what is queued for at most `deadline_s` seconds, then drop the rest (counted).
        True when everything queued was handled in time."""
        self._deadline = time.monotonic() + max(0.0, deadline_s)
        self._closing.set()
        while True:
            try:
                self._queue.put(None, timeout=0.05)
                break
            except queue.Full:
                if self._past_deadline():
                    break
        self._worker.join(timeout=max(0.0, self._deadline - time.monotonic()) + 0.05)
        finished = not self._worker.is_alive()
        if not finished:
            # The sender is stuck in one attempt (its own timeout bounds it); what is still queued
            # is dropped now so the counts are final.
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    self._drop(item.size, item.count, "shutdown deadline passed before it could be sent")
        return finished
