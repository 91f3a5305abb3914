"""Kernel symbols from /proc/kallsyms, as sorted numpy arrays."""

from __future__ import annotations

import numpy as np

_TEXT_TYPES = set("tTwW")


class KernelSymbols:
    def __init__(self, addresses: np.ndarray, names: list[str]) -> None:
        self.addresses = addresses
        self.names = names

    @classmethod
    def load(cls, path: str = "/proc/kallsyms") -> "KernelSymbols":
        addrs: list[int] = []
        names: list[str] = []
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3 or parts[1] not in _TEXT_TYPES:
                    continue
                addr = int(parts[0], 16)
                if addr == 0:  # addresses hidden (kptr_restrict): nothing to resolve with
                    continue
                addrs.append(addr)
                names.append(parts[2])
        order = np.argsort(np.array(addrs, dtype=np.uint64), kind="stable")
        return cls(np.array(addrs, dtype=np.uint64)[order], [names[i] for i in order])

    def __len__(self) -> int:
        return len(self.names)

    def lookup(self, address: int) -> str | None:
        if not self.names:
            return None
        i = int(np.searchsorted(self.addresses, np.uint64(address), side="right")) - 1
        return self.names[i] if i >= 0 else None

    def lookup_many(self, addresses: list[int]) -> list[str | None]:
        if not self.names or not addresses:
            return [None] * len(addresses)
        idx = np.searchsorted(self.addresses, np.array(addresses, dtype=np.uint64), side="right") - 1
        return [self.names[i] if i >= 0 else None for i in idx.tolist()]
