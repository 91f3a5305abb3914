"""The last N seconds of function counts, kept as one FunctionCounts per profile received.

Adding an interval and dropping the oldest cost the size of those intervals, not the window's:
the window's sum is kept up to date by merge and subtraction.
"""

from __future__ import annotations

from collections import deque

from ..profile.functions import FunctionCounts, function_counts
from ..profile.model import Profile, ProfileStats


class Window:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds            # 0: everything since the start
        self.sum = FunctionCounts()
        self.stats = ProfileStats()       # summed over the whole run (idle, lost ...)
        self._parts: deque[tuple[int, int, FunctionCounts]] = deque()   # (end ns, duration ns, counts)
        self.profiles = 0
        self._covered_ns = 0

    def add(self, profile: Profile) -> None:
        counts = function_counts(profile.samples)
        end = profile.start_ns + profile.duration_ns
        self.sum.merge(counts)
        self._covered_ns += profile.duration_ns
        if self.seconds > 0:   # cumulative windows keep no parts: nothing is ever dropped
            self._parts.append((end, profile.duration_ns, counts))
        self.stats.add(profile.stats)
        self.profiles += 1
        if self.seconds > 0:
            while self._parts and self._parts[0][0] <= end - int(self.seconds * 1e9):
                _, duration, old = self._parts.popleft()
                self.sum.merge(old, sign=-1)
                self._covered_ns -= duration

    @property
    def covered_s(self) -> float:
        """Seconds of sampling the window's counts stand for."""
        return self._covered_ns / 1e9
