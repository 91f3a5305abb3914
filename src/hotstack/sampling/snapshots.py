"""User-stack snapshots: the CPU sampler's records for processes without frame pointers.

The program sends one struct snapshot per sample through the `snapshots` ring buffer (the one
reader is ringbuf.RingBuffer). `poll` moves records out often (the ring is small), walks each
copy with the native unwinder as it leaves the ring, so that only addresses wait (18 KB per
sample would add up to hundreds of MB over a long interval), and keeps them per buffer:
their kernel stack ids point into that buffer's stack map, resolved when it is drained.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..bpf import schema
from .buffers import StackReader, raw_stack, RawStack
from .ringbuf import RingBuffer

# (pid, ip, sp, bp, stack bytes) -> the user stack's addresses, leaf first
UnwindFn = Callable[[int, int, int, int, bytes], tuple[int, ...]]


class Snapshots:
    def __init__(self, map_fd: int, size: int, unwind: UnwindFn) -> None:
        self._ring = RingBuffer(map_fd, size)
        self._unwind = unwind
        self._pending: list[tuple[int, object, bytes, tuple[int, ...]]] = []   # (buffer, key, comm, user)
        self._lock = threading.Lock()
        self.bytes_read = 0

    def poll(self) -> int:
        """Move snapshot records from the kernel's ring into the pending list; call often."""
        with self._lock:
            if self._ring is None:
                return 0
            records = self._ring.read()
            for rec in records:
                r = schema.SNAPSHOT.unpack(rec)
                start = schema.SNAPSHOT_TAIL_OFFSET
                stack = rec[start:start + min(r.stack_len, schema.SNAPSHOT_STACK_BYTES)]
                self.bytes_read += len(rec)
                self._pending.append((r.buffer, r, r.comm, self._unwind(r.pid, r.ip, r.sp, r.bp, stack)))
            return len(records)

    def take(self, buffer: int, stacks: StackReader) -> list[RawStack]:
        """The snapshots of a buffer being drained, counted per distinct stack; others stay."""
        with self._lock:
            taken = [p for p in self._pending if p[0] == buffer]
            self._pending = [p for p in self._pending if p[0] != buffer]
        counts: dict[tuple, list] = {}
        for _buffer, key, comm, user in taken:
            ident = (key.pid, key.tid, comm, user, key.kern_stack_id, key.runtime_stack, key.trace_id, key.span_id)
            entry = counts.get(ident)
            if entry is None:
                counts[ident] = [key, comm, user, 1]
            else:
                entry[3] += 1
        return [raw_stack(key, comm, n, stacks, user=user) for key, comm, user, n in counts.values()]

    def close(self) -> None:
        with self._lock:
            if self._ring is not None:
                self._ring.close()
                self._ring = None
