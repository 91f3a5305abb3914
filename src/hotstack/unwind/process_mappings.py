"""nu_procs and nu_remap (bpf/nu_procs.h): each process's executable mappings as the kernel
unwinder holds them, and the processes whose mappings it found changed.

Where the kernel walks the VMA tree (kernel_config.configure) the program fills nu_procs itself and
userspace only reads it, for a process that exited before its maps were read. Elsewhere userspace
writes each process's list from /proc/PID/maps, again when the program meets a PC outside it.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from ..bpf import schema
from ..procs.maps import Mapping, kernel_dev_field
from ..symbols.vdso import VDSO_KEY, VDSO_PATH
from .kernel_files import exec_mappings

_U32 = struct.Struct("<I")       # nu_procs and nu_remap are keyed by tgid
_WRITTEN = 4 * 1024              # processes whose last write is remembered, before the old are forgotten


def range_offset(slot: int) -> int:
    """Where struct nu_ranges holds its `slot`th struct nu_range."""
    return schema.NU_RANGES_TAIL_OFFSET + slot * schema.NU_RANGE.size


class ProcessMappings:
    """A loaded collection's nu_procs and nu_remap maps."""

    def __init__(self, procs_map, remap_map) -> None:
        self.procs_map = procs_map
        self.remap_map = remap_map                # None where the program has none
        self._written: dict[int, float] = {}      # pid -> when its mapping list was last written

    def write(self, pid: int) -> bool:
        """The userspace path (kernels without a VMA tree to walk): pid's executable mappings, sorted
        by start, for the program's binary search. A process with more than NU_CACHE_SLOTS of them
        keeps the largest; PCs in the others end the walk, counted as no mapping."""
        ranges = exec_mappings(pid)
        if not ranges:
            return False
        kept = sorted(sorted(ranges, key=lambda r: r[1] - r[0], reverse=True)[:schema.NU_CACHE_SLOTS])
        body = bytearray(schema.NU_RANGES.size)
        body[:schema.NU_RANGES_TAIL_OFFSET] = schema.NU_RANGES.pack(count=len(kept))
        for i, (start, end, offset, ino, dev, path) in enumerate(kept):
            if not ino and path == VDSO_PATH:
                ino, dev = VDSO_KEY
            # pc + to_offset wraps in 64 bits in the kernel: store the difference the same way
            to_offset = (offset - start + (1 << 63)) % (1 << 64) - (1 << 63)
            schema.NU_RANGE.struct.pack_into(body, range_offset(i), start, end, to_offset, ino, dev, 0)
        self.procs_map.update(_U32.pack(pid), bytes(body))
        self._written[pid] = time.monotonic()
        return True

    def take_remapped(self) -> list[tuple[int, int, int]]:
        """Kernels that walk the VMA tree: (pid, start, end) of the processes the program found with
        another file (or offset) in [start, end) than a mapping it had cached there, since the last
        call (struct nu_remap_value)."""
        if self.remap_map is None or not self.remap_map.any_key():
            return []
        return [(_U32.unpack(key)[0], *schema.NU_REMAP_VALUE.unpack(value)) for key, value in self.remap_map.drain()]

    def serve_remaps(self, min_interval: float = 1.0) -> int:
        """The userspace path: write again the mapping lists of processes the program met a PC
        outside of (a library loaded since, a new process), at most once per `min_interval`."""
        if self.remap_map is None:
            return 0
        done, now = 0, time.monotonic()
        for raw_key, _ in self.remap_map.items():
            self.remap_map.delete(raw_key)
            (pid,) = _U32.unpack(raw_key)
            if now - self._written.get(pid, -min_interval) >= min_interval and self.write(pid):
                done += 1
        if len(self._written) > _WRITTEN:       # forget processes written long ago
            self._written = {p: t for p, t in self._written.items() if now - t < 60}
        return done

    def exited_mappings(self, pid: int, path_of: Callable[[int, int], str | None]) -> list[Mapping]:
        """The executable file mappings the kernel unwinder used for `pid` (its per-process cache:
        start, end, file offset, inode, device), as procs.Mapping objects with a path that opens that
        very file (`path_of(ino, dev)`). For a process that exited before userspace read its maps (a
        short command on a loaded host), whose frames are otherwise unnamed. Empty if none is known."""
        raw = self.procs_map.lookup(_U32.pack(pid))
        if raw is None:
            return []
        found = {}
        for i in range(schema.NU_CACHE_SLOTS):
            start, end, to_offset, ino, dev, _ = schema.NU_RANGE.unpack(raw, range_offset(i))
            if end <= start or not ino or start in found:
                continue
            path = path_of(ino, dev)
            if path is not None:
                offset = (start + to_offset) % (1 << 64)
                found[start] = Mapping(start, end, offset, "r-xp", kernel_dev_field(dev), ino, path)
        return [found[start] for start in sorted(found)]
