"""nu_rows, the kernel unwinder's one arena of row words for every file (bpf/native_unwind.h): the
space each file's page index and rows take in it, and their writes."""

from __future__ import annotations

import mmap

import numpy as np

from ..ebpf.errors import SyscallError
from ..ebpf.maps import BPF_F_MMAPABLE


class RowArena:
    """First-fit allocation of contiguous runs of nu_rows, and the writes into them."""

    def __init__(self, rows_map) -> None:
        self.map = rows_map
        self.capacity = rows_map.spec.max_entries
        self.mappable = self._can_map()
        self._free: list[tuple[int, int]] = [(0, self.capacity)]     # (first, count), sorted

    def _can_map(self) -> bool:
        if not self.map.spec.flags & BPF_F_MMAPABLE:
            return False
        try:
            self.map.mmap(0, mmap.PAGESIZE).close()
            return True
        except (SyscallError, ValueError):
            return False

    def has_room(self, count: int) -> bool:
        """Whether `count` contiguous rows are free."""
        return any(size >= count for _, size in self._free)

    def allocate(self, count: int) -> int | None:
        """The first row of `count` contiguous free rows, now taken; None if no run is long enough."""
        for i, (first, size) in enumerate(self._free):
            if size >= count:
                if size == count:
                    del self._free[i]
                else:
                    self._free[i] = (first + count, size - count)
                return first
        return None

    def release(self, first: int, count: int) -> None:
        """Give rows back, merged with the free runs beside them."""
        self._free.append((first, count))
        self._free.sort()
        merged: list[tuple[int, int]] = []
        for f, c in self._free:
            if merged and merged[-1][0] + merged[-1][1] == f:
                merged[-1] = (merged[-1][0], merged[-1][1] + c)
            else:
                merged.append((f, c))
        self._free = merged

    def write(self, first: int, rows: np.ndarray) -> None:
        """rows into nu_rows[first:]: through a mapping of just their pages where the map allows it
        (mapped for the copy only: the kernel maps every page of a mapping at once, and pages kept
        mapped would count in our RSS), else as a batch update. A table of 500k rows is ~0.5 s of
        kernel time as a batch update (the kernel updates element by element), milliseconds as a
        copy."""
        if not len(rows):
            return
        if not self.mappable:
            keys = np.arange(first, first + len(rows), dtype=np.uint32)
            self.map.update_batch(keys.tobytes(), rows.astype("<u8").tobytes(), len(rows))
            return
        lo = first * 8 // mmap.PAGESIZE * mmap.PAGESIZE
        hi = (first + len(rows)) * 8
        with self.map.mmap(lo, hi - lo) as mem:
            view = np.frombuffer(mem, dtype="<u8")
            view[first - lo // 8:first - lo // 8 + len(rows)] = rows
            del view      # the mapping closes only once no view of it is left
