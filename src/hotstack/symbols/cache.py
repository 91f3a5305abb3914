"""A least-recently-used cache bounded by bytes, with the counters that debug info and metrics show."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes: int = 0
    entries: int = 0


class ByteLRU(Generic[V]):
    """Entries weigh what `size_of(value)` says; the oldest are dropped past `max_bytes`.

    One entry larger than the whole budget is still kept (alone): a huge binary must resolve.
    """

    def __init__(self, max_bytes: int, size_of: Callable[[V], int],
                 on_evict: Callable[[Hashable, V], None] | None = None) -> None:
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._on_evict = on_evict
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.RLock()
        self.stats = CacheStats()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.stats.misses += 1
                return None
            self._items.move_to_end(key)
            self.stats.hits += 1
            return item[0]

    def peek(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._items.get(key)
            return item[0] if item is not None else None

    def put(self, key: Hashable, value: V) -> V:
        size = max(0, int(self._size_of(value)))
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.stats.bytes -= old[1]
            self._items[key] = (value, size)
            self.stats.bytes += size
            self._evict()
            self.stats.entries = len(self._items)
        return value

    def resize(self, key: Hashable) -> None:
        """Re-weigh an entry whose value grew (names decoded, perf map reloaded)."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return
            size = max(0, int(self._size_of(item[0])))
            self.stats.bytes += size - item[1]
            self._items[key] = (item[0], size)
            self._evict()
            self.stats.entries = len(self._items)

    def pop(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._items.pop(key, None)
            if item is None:
                return None
            self.stats.bytes -= item[1]
            self.stats.entries = len(self._items)
            return item[0]

    def _evict(self) -> None:
        while self.stats.bytes > self.max_bytes and len(self._items) > 1:
            key, (value, size) = self._items.popitem(last=False)
            self.stats.bytes -= size
            self.stats.evictions += 1
            if self._on_evict is not None:
                self._on_evict(key, value)

    def values(self) -> list[V]:
        with self._lock:
            return [v for v, _ in self._items.values()]

    def items(self) -> list[tuple[Any, V, int]]:
        with self._lock:
            return [(k, v, s) for k, (v, s) in self._items.items()]

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items
