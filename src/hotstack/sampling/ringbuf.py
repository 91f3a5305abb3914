"""Consumer side of a BPF_MAP_TYPE_RINGBUF map, through mmap.

The kernel exposes a ring buffer as: one read-write page holding the consumer
position, then one read-only page holding the producer position, then the data
pages mapped twice in a row (so a record that wraps around reads as one slice).
Each record starts with an 8-byte header: u32 length with two flag bits (BUSY:
not committed yet, DISCARD: dropped by the program), u32 page offset.
"""

from __future__ import annotations

import mmap
import struct

_BUSY = 1 << 31
_DISCARD = 1 << 30
_HEADER = 8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


class RingBuffer:
    def __init__(self, map_fd: int, size: int) -> None:
        if size <= 0 or size & (size - 1) or size % mmap.PAGESIZE:
            raise ValueError(f"ring buffer size {size} is not a power of two of pages")
        self.size = size
        self._mask = size - 1
        page = mmap.PAGESIZE
        self._consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._producer = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self._data = memoryview(self._producer)[page:]
        self.backlog = 0      # bytes written and not read when the last read() began

    def read(self, limit: int = 1 << 30) -> list[bytes]:
        """Every committed record (copied out), oldest first; frees their space in the ring."""
        out: list[bytes] = []
        consumer = _U64.unpack_from(self._consumer, 0)[0]
        producer = _U64.unpack_from(self._producer, 0)[0]
        self.backlog = producer - consumer
        data, mask = self._data, self._mask
        while consumer < producer and len(out) < limit:
            start = consumer & mask
            length = _U32.unpack_from(data, start)[0]
            if length & _BUSY:
                break          # reserved, not yet submitted: read it next time
            size = length & ~(_BUSY | _DISCARD)
            if not length & _DISCARD:
                out.append(bytes(data[start + _HEADER:start + _HEADER + size]))
            consumer += (size + _HEADER + 7) & ~7
        _U64.pack_into(self._consumer, 0, consumer)
        return out

    def pending(self) -> bool:
        """Whether the producer wrote past what was read (a record, committed or not yet)."""
        return _U64.unpack_from(self._consumer, 0)[0] < _U64.unpack_from(self._producer, 0)[0]

    def close(self) -> None:
        self._data.release()
        self._producer.close()
        self._consumer.close()
