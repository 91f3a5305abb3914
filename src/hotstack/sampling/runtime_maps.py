"""A frame source's kernel half, by role (unwind/runtimes.RuntimeKernel), over a loaded collection.

The roles come from bpf/schema.yaml (a group with `runtime:`): the tunable the walker needs, the
map of processes to walk, the double-buffered map of recorded stacks and the counters; for an
interpreter walked by a program of its own (`walker`, tail-called through rt_progs[`slot`]),
that program, which is loaded when the first process is listed: verifying a walker costs
0.1-0.7 s of CPU, paid only on hosts that run the interpreter.
"""

from __future__ import annotations

import logging
import struct
import threading

from .. import ebpf
from ..bpf import schema

_PID = struct.Struct("<I")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_WALKS = _U32.pack(0)       # every runtime group's first counter counts the walker's walks (bpf/schema.yaml)
# A batched read's buffers are a batch of values: under glibc's mmap threshold (128 KiB) they come
# from the heap. 256 records of 4 KiB (Ruby, PHP, Perl) were two fresh 1 MiB mappings per read, ~2 ms
# of CPU for an empty map; 29 records a call is ~30 us empty and ~2.5 us per record.
_BATCH_BYTES = 120 << 10


class RuntimeMaps:
    def __init__(self, collection: ebpf.Collection, group: str) -> None:
        self._collection = collection
        self._roles = schema.RUNTIMES[group]
        self._processes = collection.maps[self._roles["processes"]]
        self._counters = collection.maps[self._roles["counters"]]
        self._totals = [0] * self._roles["counter_count"]
        self._walker_ready: bool | None = None if "walker" in self._roles else True
        self._walker_lock = threading.Lock()
        self._batch = max(1, _BATCH_BYTES // self._stacks(0).buffer_value_size)

    def configure(self, value: int) -> None:
        self._collection.variable(self._roles["tunable"]).set(value)

    def _walker(self) -> bool:
        """The walker program loaded and in its slot (once); False if it cannot load here."""
        if self._walker_ready is not None:
            return self._walker_ready
        with self._walker_lock:
            if self._walker_ready is None:
                try:
                    program = self._collection.load_deferred(self._roles["walker"])
                    self._collection.maps["rt_progs"].update(_U32.pack(self._roles["slot"]), _U32.pack(program.fd))
                    self._walker_ready = True
                except (ebpf.EbpfError, OSError, ValueError, KeyError) as e:
                    logging.getLogger(__name__).warning("%s frames off: %s", self._roles["walker"], e)
                    self._walker_ready = False
        return self._walker_ready

    def track(self, pid: int, record: bytes) -> bool:
        if not self._walker():
            return False
        try:
            self._processes.update(_PID.pack(pid), record)
        except (ebpf.EbpfError, OSError, ValueError):      # map full, or the session is closing: native frames only
            return False
        return True

    def untrack(self, pid: int) -> None:
        try:
            self._processes.delete(_PID.pack(pid))
        except (ebpf.EbpfError, OSError, ValueError):
            pass

    def _stacks(self, buffer: int) -> ebpf.Map:
        return self._collection.maps[schema.buffered(self._roles["stacks"], buffer)]

    def recorded(self, buffer: int, skip=()):
        """(key, record) pairs so far, but for keys in `skip` (already read). One batched read of
        the map (a syscall per ~30 records): walking the keys took two syscalls per record (next
        key, lookup), ~0.1% of a core for 30 interpreter processes."""
        for key, raw in self._stacks(buffer).items(self._batch):
            if key not in skip:
                yield key, raw

    def take(self, buffer: int) -> list[tuple[bytes, bytes]]:
        return self._stacks(buffer).drain(self._batch)

    def walks(self) -> int:
        """The walker's walks so far, over every CPU (one syscall): a stack is recorded only by a
        walk, so while this stays the same nothing new was recorded."""
        return sum(_U64.unpack_from(v)[0] for v in self._counters.lookup_percpu(_WALKS))

    def counters(self) -> list[int]:
        totals = [sum(_U64.unpack_from(v)[0] for v in self._counters.lookup_percpu(_U32.pack(i)))
                  for i in range(len(self._totals))]
        delta = [t - p for t, p in zip(totals, self._totals)]
        self._totals = totals
        return delta
