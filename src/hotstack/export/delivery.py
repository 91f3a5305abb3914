"""Delivery that never hurts sampling: a bounded queue per exporter, drained by its own thread.

The producer (the sampling loop) only ever calls `offer()`, which never blocks: when the queue is
full (in items or in bytes), the item is dropped, counted and logged (rate-limited) at once. The
worker sends each item with retries and exponential backoff; a failure that retrying cannot fix
drops the item. The first failed attempt is logged at once, later ones rate-limited, and the
queue reports when its receiver starts and stops failing (a component shows it as its health).

On shutdown, `close(deadline_s)` gives each queued item one attempt until the deadline; once the
receiver fails, or the deadline passes, the rest is dropped (counted, and said in one line). An
attempt still hanging at the deadline is aborted (its connection shut), so a stop never waits
for a receiver's timeout.
"""

from __future__ import annotations

import logging
import queue
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, NamedTuple, TypeVar

from ..text import escape, shorten

T = TypeVar("T")

log = logging.getLogger("hotstack.export")

# What both front doors give their exporters to flush at a stop (SIGTERM, Ctrl-C, --timeout).
FLUSH_DEADLINE_S = 3.0
# The bytes one exporter may hold (queued plus the one in flight): the profiler's memory stays
# bounded whatever the receiver does (down, hanging, slow). An item larger than this alone is
# still taken when nothing else is held, so that a huge profile can be sent at all.
DEFAULT_QUEUE_BYTES = 16 << 20
MAX_LOGGED_CHARS = 300


# A password in a URL (scheme://user:password@host), shown as Go's url.Redacted() shows it.
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/:@\s]*:)[^@/\s]+@")


def redact_url(text: str) -> str:
    """Passwords of the URLs in a text replaced by `xxxxx` (user names are kept)."""
    return _URL_PASSWORD.sub(r"\1xxxxx@", text) if "@" in text else text


def printable(text: object, limit: int = MAX_LOGGED_CHARS) -> str:
    """Text from a receiver (an error body, a status line) made safe for one log line: escaped
    as every terminal output is (hotstack.text), at most `limit` characters."""
    return shorten(escape(text), limit)


class RetryableError(Exception):
    """The send failed in a way that may pass on a later try (timeout, 5xx, unavailable...)."""


class PermanentError(Exception):
    """The receiver refused the item; sending it again would fail the same way."""


# Between tries of an item that fails during shutdown (bounded by the flush deadline).
SHUTDOWN_RETRY_S = 0.25


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
    """At most one line per `interval_s`; the first one at once; what was held back is counted
    in the next line."""

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


class PartlySent(NamedTuple):
    """What a sender returns when it sent only part of an item: the rest was dropped (and counted
    as such) or queued again as items of their own."""
    items: int
    nbytes: int


class DeliveryQueue(Generic[T]):
    """One bounded queue and one sender thread for one exporter."""

    def __init__(self, name: str, send: "Callable[[T], int | PartlySent | None]", *, capacity: int = 64,
                 max_bytes: int = DEFAULT_QUEUE_BYTES, backoff: Backoff = Backoff(),
                 metrics: DeliveryMetrics | None = None, logger: logging.Logger = log,
                 log_interval_s: float = 10.0, abort: Callable[[], None] | None = None,
                 on_health: Callable[[str], None] | None = None,
                 on_delivered: Callable[[float], None] | None = None) -> None:
        """`abort()` cuts an attempt in flight (called from close() at the deadline);
        `on_health(error)` is called when the receiver starts failing (the error) and when it
        accepts again (""); `on_delivered(seconds)` after each item is sent or given up, with the
        time its tries took (retries and backoff included, queueing not)."""
        self.name = name
        self._send = send
        self._queue: queue.Queue[_Item[T] | None] = queue.Queue(maxsize=capacity)
        self.max_bytes = max_bytes
        self._held_bytes = 0           # queued plus in flight
        self._held_lock = threading.Lock()
        self.backoff = backoff
        self.metrics = metrics or DeliveryMetrics()
        self.log = RateLimitedLog(logger, log_interval_s)             # drops
        self._failure_log = RateLimitedLog(logger, log_interval_s)    # failed attempts
        self._logger = logger
        self._abort = abort
        self._on_health = on_health
        self._on_delivered = on_delivered
        self.failing = ""              # the last attempt's error while the receiver fails
        self._closing = threading.Event()   # no new items; retry waits end early
        self._deadline: float | None = None
        self._dropped_at_close = [0, 0]     # items, bytes
        self._why_at_close = ""             # why the first of them was dropped
        self._worker = threading.Thread(target=self._run, name=f"hotstack-export-{name}", daemon=True)
        self._worker.start()

    def offer(self, payload: T, size: int = 0, count: int = 1) -> bool:
        """Queue an item without ever blocking. False: dropped (queue full or closed), and counted."""
        if self._closing.is_set():
            self._drop(size, count, "exporter is shutting down")
            return False
        with self._held_lock:
            if self._held_bytes and self._held_bytes + size > self.max_bytes:
                held = self._held_bytes
            else:
                held = -1
                self._held_bytes += size
        if held >= 0:
            self._drop(size, count, f"queue full ({held >> 10} KiB held, limit {self.max_bytes >> 10} KiB): "
                                    f"the receiver is slower than the profiler")
            return False
        try:
            self._queue.put_nowait(_Item(payload, size, count))
            return True
        except queue.Full:
            self._release(size)
            self._drop(size, count, f"queue full ({self._queue.maxsize} pending): the receiver is slower "
                                    f"than the profiler")
            return False

    def _release(self, size: int) -> None:
        with self._held_lock:
            self._held_bytes -= size

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def _drop(self, size: int, count: int, why: str) -> None:
        self.metrics.add(dropped_items=count, dropped_bytes=size)
        if self._closing.is_set():
            with self._held_lock:
                self._dropped_at_close[0] += count
                self._dropped_at_close[1] += size
                self._why_at_close = self._why_at_close or why
            return           # close() says it once, with the totals and the first reason
        self.log.warning(f"{self.name}: dropped {count} profile(s): {printable(why)}")

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                if self._past_deadline():
                    self._drop(item.size, item.count, "shutdown deadline passed before it could be sent")
                elif self._closing.is_set() and self.failing:
                    self._drop(item.size, item.count, f"the receiver is failing ({self.failing})")
                else:
                    started = time.monotonic()
                    self._deliver(item)
                    if self._on_delivered is not None:
                        self._on_delivered(time.monotonic() - started)
            finally:
                self._release(item.size)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _set_failing(self, error: str) -> None:
        was, self.failing = self.failing, error
        if bool(was) != bool(error) and self._on_health is not None:
            try:
                self._on_health(error)
            except Exception as e:  # noqa: BLE001 - a health hook must not stop delivery
                self._logger.debug("%s: health callback failed: %s", self.name, e)
        if was and not error:
            self._logger.info("%s: the receiver accepts again", self.name)

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
                error = printable(e) or type(e).__name__
                if self._closing.is_set() and self._past_deadline():
                    # Cut by close() at the deadline: the receiver did not answer in time.
                    self._drop(item.size, item.count, "no answer before the flush deadline")
                    return
                failing_before = bool(self.failing)
                self._set_failing(error)
                if self._closing.is_set():
                    # Shutting down. A receiver that accepted until now gets more tries while the
                    # deadline leaves room: a short run's only export must survive one transient
                    # refusal (a collector whose queue is momentarily full answers UNAVAILABLE). A
                    # receiver that was already failing gets none, and the rest of the queue is
                    # dropped without trying (run()).
                    delay = min(self.backoff.delay(retries), SHUTDOWN_RETRY_S)
                    if not failing_before and time.monotonic() + delay < (self._deadline or 0.0):
                        time.sleep(delay)
                        retries += 1
                        self.metrics.add(retries=1)
                        continue
                    why = "shutdown deadline passed" if self._past_deadline() else "failed at shutdown"
                    self._drop(item.size, item.count, f"{error} ({why})")
                    return
                if self.backoff.gives_up_after(retries):
                    self._drop(item.size, item.count, f"{error} (gave up after {retries} retries)")
                    return
                delay = self.backoff.delay(retries)
                self._failure_log.warning(f"{self.name}: push failed: {error}; retry {retries + 1} "
                                          f"in {delay:.1f}s")
                if not self._wait_backoff(delay):
                    # Shutdown began while this item waited for its retry. Its first retry still
                    # comes, soon and within the deadline (a collector's transient UNAVAILABLE must
                    # not lose a short run's only export); a second failure drops it at once.
                    if retries > 0 or self._deadline is None or \
                            time.monotonic() + SHUTDOWN_RETRY_S >= self._deadline:
                        self._drop(item.size, item.count, f"{error} (shutting down while waiting to retry)")
                        return
                    time.sleep(SHUTDOWN_RETRY_S)
                retries += 1
                self.metrics.add(retries=1)
                continue
            # A sender that encodes lazily returns the size it put on the wire; one that sent only
            # part of the item (the rest dropped or queued again, counted there) returns (items, bytes).
            if isinstance(sent, PartlySent):
                self.metrics.add(sent_items=sent.items, sent_bytes=sent.nbytes)
            else:
                self.metrics.add(sent_items=item.count, sent_bytes=sent if isinstance(sent, int) else item.size)
            self._set_failing("")
            return

    def _wait_backoff(self, delay: float) -> bool:
        """Sleep before the next try; False when shutdown began first (its items get one try each
        and a failing receiver none)."""
        self._closing.wait(delay)          # close() wakes us
        return not self._closing.is_set()

    def pending(self) -> int:
        return self._queue.qsize()

    def close(self, deadline_s: float = FLUSH_DEADLINE_S) -> bool:
        """Send what is queued for at most `deadline_s` seconds, then drop the rest (counted, and
        said in one line). True when everything queued was handled in time."""
        self._deadline = time.monotonic() + max(0.0, deadline_s)
        self._closing.set()
        while True:
            try:
                self._queue.put(None, timeout=0.05)
                break
            except queue.Full:
                if self._past_deadline():
                    break
        self._worker.join(timeout=max(0.0, self._deadline - time.monotonic()))
        finished = not self._worker.is_alive()
        if not finished:
            # An attempt is hanging (its own timeout is longer than what is left): cut it, so the
            # item is counted as dropped by the worker itself, then drop what is still queued.
            if self._abort is not None:
                try:
                    self._abort()
                except Exception as e:  # noqa: BLE001
                    self._logger.debug("%s: abort failed: %s", self.name, e)
                self._worker.join(timeout=0.5)
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    self._drop(item.size, item.count, "shutdown deadline passed before it could be sent")
                    self._release(item.size)
            self._queue.put_nowait(None)    # the worker, once unstuck, ends
        items, size = self._dropped_at_close
        if items:
            why = (f"the receiver is failing: {self.failing}" if self.failing else
                   self._why_at_close or "the receiver did not answer in time")
            # (an item offered without its size, an OTLP request encoded on the delivery thread,
            # adds none: its bytes are not said rather than said to be 0)
            nbytes = f" ({size} bytes)" if size else ""
            self._logger.warning("%s: stopped at shutdown (flush deadline %.1fs); dropped %d profile(s)%s: %s",
                                 self.name, deadline_s, items, nbytes, why)
        return finished


def close_together(closers: list[Callable[[float], object]], deadline_s: float = FLUSH_DEADLINE_S) -> None:
    """Close several exporters at once, so that together they take one deadline, not one each."""
    threads = [threading.Thread(target=c, args=(deadline_s,), name="hotstack-export-close", daemon=True)
               for c in closers]
    for t in threads:
        t.start()
    end = time.monotonic() + deadline_s + 1.0
    for t in threads:
        t.join(timeout=max(0.0, end - time.monotonic()))
