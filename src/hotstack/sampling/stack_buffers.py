"""Reading the double-buffered stack counts of event-driven BPF programs.

Mirrors bpf/event_counts.h (probe.bpf.c, offcpu.bpf.c): counts per (pid, tid,
user stack id, kernel stack id, caller) in `counts_{0,1}`, stacks in
`{user,kern}_stacks_{0,1}`, per-CPU `stats`, and the `active_buffer` global.
Reading flips the programs to the other buffer, waits for programs still
running on the old one, then drains and clears it.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import ebpf
from ..profile.model import ProfileStats

EVENT_KEY = struct.Struct("<IIiiQ16s8s")  # pid, tid, user_stack_id, kern_stack_id, caller, trace id, span id
EVENT_VALUE = struct.Struct("<Q16s")    # value, comm
STACK_ID = struct.Struct("<I")

# enum event_stat_index
STAT_EVENTS, STAT_IDLE, STAT_FILTERED, STAT_COUNTS_FULL = 0, 1, 2, 3
STAT_USTACK_COLLISION, STAT_KSTACK_COLLISION, STAT_USTACK_ERROR, STAT_KSTACK_ERROR = 4, 5, 6, 7
STAT_MAX = 8

# Event programs run with preemption off and take microseconds: after a flip,
# this is ample time for any program that read the old buffer index to finish.
FLIP_GRACE_S = 0.005


@dataclass(frozen=True, slots=True)
class EventSample:
    pid: int
    tid: int
    comm: str
    user_stack: tuple[int, ...]       # leaf first; empty if not collected or lost
    kernel_stack: tuple[int, ...]     # leaf first
    value: int                        # hits, or nanoseconds
    user_stack_lost: bool = False
    kernel_stack_lost: bool = False
    trace_id: bytes = bytes(16)       # the thread's OBI span at the event, zero: none
    span_id: bytes = bytes(8)


@dataclass
class EventBatch:
    samples: list[EventSample]
    start_ns: int
    end_ns: int
    stats: ProfileStats


def parse_stack(raw: bytes) -> tuple[int, ...]:
    addrs = struct.unpack_from(f"<{len(raw) // 8}Q", raw)
    try:
        return addrs[:addrs.index(0)]
    except ValueError:
        return addrs


def with_caller(stack: tuple[int, ...], caller: int) -> tuple[int, ...]:
    """Put the caller (return address read at a function's entry) after the leaf, unless it is there."""
    if not caller or not stack or (len(stack) > 1 and stack[1] == caller):
        return stack
    return (stack[0], caller) + stack[1:]


class StackBuffers:
    """The two buffers of one loaded event collection."""

    def __init__(self, collection: ebpf.Collection) -> None:
        self._collection = collection
        self._active = 0
        self._last_ns = time.time_ns()
        self._lock = threading.Lock()
        self._stat_totals = [0] * STAT_MAX

    def collect(self, keep_stacks: Callable[[int], Iterable[tuple[int, int]]] | None = None) -> EventBatch:
        """Everything counted since the previous collect.

        `keep_stacks(buffer)` names (user, kernel) stack ids that must survive the
        drain because an event still in flight will count them later.
        """
        with self._lock:
            drained = self._active
            self._active ^= 1
            self._collection.variable("active_buffer").set(self._active)
            time.sleep(FLIP_GRACE_S)
            now = time.time_ns()
            keep = list(keep_stacks(drained)) if keep_stacks is not None else []
            batch = EventBatch(self._read(drained, keep), self._last_ns, now, self._read_stats())
            self._last_ns = now
            return batch

    def _read(self, index: int, keep: list[tuple[int, int]]) -> list[EventSample]:
        maps = self._collection.maps
        ustacks, kstacks = maps[f"user_stacks_{index}"], maps[f"kern_stacks_{index}"]
        entries = maps[f"counts_{index}"].drain()
        caches: dict[int, dict[int, tuple[int, ...] | None]] = {id(ustacks): {}, id(kstacks): {}}

        def stack(m: ebpf.Map, stack_id: int) -> tuple[int, ...] | None:
            if stack_id < 0:
                return ()
            cache = caches[id(m)]
            if stack_id not in cache:
                raw = m.lookup(STACK_ID.pack(stack_id))
                cache[stack_id] = parse_stack(raw) if raw is not None else None
            return cache[stack_id]

        samples = []
        for key, value in entries:
            pid, tid, ustack_id, kstack_id, caller, trace_id, span_id = EVENT_KEY.unpack_from(key)
            total, comm = EVENT_VALUE.unpack_from(value)
            ustack, kstack = stack(ustacks, ustack_id), stack(kstacks, kstack_id)
            samples.append(EventSample(
                pid, tid, comm.split(b"\0", 1)[0].decode("utf-8", "replace"),
                with_caller(ustack or (), caller), kstack or (), total,
                # -1 is "not collected", -14 (EFAULT) "no user stack here" (kernel threads)
                user_stack_lost=ustack is None or ustack_id < -1 and ustack_id != -14,
                kernel_stack_lost=kstack is None or kstack_id < -1, trace_id=trace_id, span_id=span_id))
        kept_user = {u for u, _ in keep if u >= 0}
        kept_kern = {k for _, k in keep if k >= 0}
        for m, kept in ((ustacks, kept_user), (kstacks, kept_kern)):
            # Every stack not still referenced goes, including those whose count could not be stored.
            for raw_id in list(m.keys()):
                if STACK_ID.unpack(raw_id)[0] not in kept:
                    m.delete(raw_id)
        return samples

    def _read_stats(self) -> ProfileStats:
        stats_map = self._collection.maps["stats"]
        totals = []
        for i in range(STAT_MAX):
            values = stats_map.lookup_percpu(STACK_ID.pack(i))
            totals.append(sum(struct.unpack_from("<Q", v)[0] for v in values))
        delta = [t - p for t, p in zip(totals, self._stat_totals)]
        self._stat_totals = totals
        return ProfileStats(
            samples=delta[STAT_EVENTS], idle=delta[STAT_IDLE], filtered=delta[STAT_FILTERED],
            counts_full=delta[STAT_COUNTS_FULL],
            user_stacks_lost=delta[STAT_USTACK_COLLISION] + delta[STAT_USTACK_ERROR],
            kernel_stacks_lost=delta[STAT_KSTACK_COLLISION] + delta[STAT_KSTACK_ERROR],
            stack_collisions=delta[STAT_USTACK_COLLISION] + delta[STAT_KSTACK_COLLISION])


def drain_new_pids(m: "ebpf.Map") -> list[int]:
    return [struct.unpack_from("<I", key)[0] for key, _ in m.drain()]


class LinkedEventSession:
    """What probe and off-CPU sessions share: programs attached by links, counts in StackBuffers,
    new pids announced by the program. Subclasses load the collection and attach in start()."""

    def __init__(self, config) -> None:
        self.config = config
        self._collection: ebpf.Collection | None = None
        self._buffers: StackBuffers | None = None
        self._links: list = []

    def new_pids(self) -> list[int]:
        return drain_new_pids(self._collection.maps["new_pids"]) if self._collection is not None else []

    def stop(self) -> None:
        """Detach every link (the counts stay readable)."""
        for link in self._links:
            link.close()
        self._links = []

    def close(self) -> None:
        self.stop()
        if self._collection is not None:
            self._collection.close()
            self._collection = None
        self._buffers = None
