"""Kernel symbols from /proc/kallsyms: sorted numpy addresses, names in one bytes blob.

The kernel has ~120k text symbols. As a list of Python strings they cost ~18 MB of the
agent's memory; as one blob with offsets, a few MB. Names are decoded only when looked up.
"""

from __future__ import annotations

from array import array

import numpy as np

_TEXT_TYPES = frozenset(b"tTwW")


class KernelSymbols:
    def __init__(self, addresses: np.ndarray, blob: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
        self.addresses = addresses
        self._blob = blob
        self._starts = starts
        self._ends = ends

    @classmethod
    def load(cls, path: str = "/proc/kallsyms") -> "KernelSymbols":
        addrs = array("Q")
        starts = array("I")
        ends = array("I")
        blob = bytearray()
        with open(path, "rb") as f:
            for line in f:
                # "ffffffff81000000 T _stext" or "ffffffffc0000000 t name\t[module]"
                addr_end = line.find(b" ")
                if addr_end < 0 or addr_end + 3 >= len(line) or line[addr_end + 1] not in _TEXT_TYPES:
                    continue
                addr = int(line[:addr_end], 16)
                if addr == 0:  # addresses hidden (kptr_restrict): nothing to resolve with
                    continue
                name = line[addr_end + 3:].split(None, 1)[0]
                addrs.append(addr)
                starts.append(len(blob))
                blob += name
                ends.append(len(blob))
        a = np.frombuffer(addrs, dtype=np.uint64) if addrs else np.zeros(0, dtype=np.uint64)
        order = np.argsort(a, kind="stable")
        return cls(a[order], bytes(blob), np.frombuffer(starts, dtype=np.uint32)[order],
                   np.frombuffer(ends, dtype=np.uint32)[order])

    def __len__(self) -> int:
        return len(self.addresses)

    def name(self, i: int) -> str:
        return self._blob[int(self._starts[i]):int(self._ends[i])].decode("utf-8", "replace")

    def lookup(self, address: int) -> str | None:
        return self.lookup_many([address])[0]

    def lookup_many(self, addresses: list[int]) -> list[str | None]:
        if not len(self.addresses) or not addresses:
            return [None] * len(addresses)
        idx = np.searchsorted(self.addresses, np.array(addresses, dtype=np.uint64), side="right") - 1
        return [self.name(i) if i >= 0 else None for i in idx.tolist()]
