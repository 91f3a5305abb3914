"""Symbol table of one ELF file: address -> function name, batch lookups with numpy."""

from __future__ import annotations

import numpy as np

from .elf import ElfFile


class SymbolTable:
    """Function symbols of one file; names decoded lazily and cached."""

    def __init__(self, elf: ElfFile) -> None:
        self._elf = elf
        self.values, self.sizes, self._names, self._tables, self._strtabs = elf.function_symbols()
        self._ends = self.values + np.maximum(self.sizes, 1)
        self._decoded: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.values)

    def lookup_many(self, vaddrs: list[int]) -> list[tuple[str, int] | None]:
        """(name, offset into the function) for each address, or None when no symbol covers it.

        A symbol's size is respected: an address past its end is not that symbol. Symbols of
        size 0 (hand-written assembly) cover only their first byte... unless nothing follows:
        they then cover up to the next symbol, as perf and addr2line treat them.
        """
        if not len(self.values) or not vaddrs:
            return [None] * len(vaddrs)
        q = np.array(vaddrs, dtype=np.uint64)
        idx = np.searchsorted(self.values, q, side="right") - 1
        out: list[tuple[str, int] | None] = []
        n = len(self.values)
        for address, i in zip(vaddrs, idx.tolist()):
            if i < 0:
                out.append(None)
                continue
            size = int(self.sizes[i])
            start = int(self.values[i])
            if size:
                if address >= start + size:
                    out.append(None)
                    continue
            elif i + 1 < n and address >= int(self.values[i + 1]):
                out.append(None)
                continue
            out.append((self.name(i), address - start))
        return out

    def name(self, i: int) -> str:
        cached = self._decoded.get(i)
        if cached is None:
            cached = self._elf.symbol_name(self._strtabs[int(self._tables[i])], int(self._names[i]))
            self._decoded[i] = cached
        return cached

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes + self.sizes.nbytes + self._names.nbytes + self._tables.nbytes
                   + self._ends.nbytes)
