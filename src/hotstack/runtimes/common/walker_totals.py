"""A kernel walker's counters summed since the start, for a frame source's stats()."""

from __future__ import annotations


class WalkerTotals:
    """The walker's counters (its schema group's enum order), summed: the walker hands out what it
    counted since the last call (RuntimeKernel.counters)."""

    def __init__(self, size: int) -> None:
        self.totals = [0] * size

    def update(self, kernel) -> list[int]:
        """The totals, with what `kernel` (None until the source's first process) counted since the
        last call added."""
        if kernel is not None:
            try:
                for i, delta in enumerate(kernel.counters()):
                    self.totals[i] += delta
            except Exception:       # the walker's maps are closing
                pass
        return self.totals
