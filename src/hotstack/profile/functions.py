"""Functions by self and total samples: what `hotstack top` and the UI's table show.

Pure data: a Profile in, one row per function out. "Self" counts the samples whose leaf is the
function; "total" the samples with the function anywhere on the stack, once per sample (a
recursive function is not counted twice), so a total share never passes 100%.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from .model import Frame, Sample

NO_STACK = "[no stack]"


@dataclass(frozen=True, slots=True)
class FunctionKey:
    """A function as people tell them apart: its name and the file it lives in."""

    name: str
    module: str = ""      # basename of the mapped file; "[kernel]" for kernel frames
    kernel: bool = False

    @classmethod
    def of(cls, frame: Frame) -> "FunctionKey":
        module = "[kernel]" if frame.is_kernel else os.path.basename(frame.module)
        return cls(frame.name, module, frame.is_kernel)


@dataclass(slots=True)
class FunctionRow:
    key: FunctionKey
    self_samples: int = 0
    total_samples: int = 0


class FunctionCounts:
    """Running self/total counts; add samples, read rows. Several intervals can be added and
    subtracted (a sliding window) without keeping their samples."""

    def __init__(self) -> None:
        self.rows: dict[FunctionKey, FunctionRow] = {}
        self.samples = 0

    def add(self, samples: Iterable[Sample], sign: int = 1) -> None:
        rows = self.rows
        for sample in samples:
            value = sample.value * sign
            self.samples += value
            stack = sample.stack or (Frame(NO_STACK, resolved=False),)
            seen: set[FunctionKey] = set()
            for i, frame in enumerate(stack):
                key = FunctionKey.of(frame)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = FunctionRow(key)
                if i == 0:
                    row.self_samples += value
                if key not in seen:
                    seen.add(key)
                    row.total_samples += value
        if sign < 0:
            for key in [k for k, r in rows.items() if r.total_samples <= 0]:
                del rows[key]

    def merge(self, other: "FunctionCounts", sign: int = 1) -> None:
        self.samples += other.samples * sign
        for key, o in other.rows.items():
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = FunctionRow(key)
            row.self_samples += o.self_samples * sign
            row.total_samples += o.total_samples * sign
            if row.total_samples <= 0:
                del self.rows[key]

    def top(self, sort: str = "self", pattern: str = "", limit: int | None = None) -> list[FunctionRow]:
        """Rows sorted by `sort` ("self", "total" or "name"), keeping names or modules that
        contain `pattern` (case-insensitive)."""
        rows: Iterable[FunctionRow] = self.rows.values()
        if pattern:
            p = pattern.lower()
            rows = [r for r in rows if p in r.key.name.lower() or p in r.key.module.lower()]
        if sort == "name":
            ordered = sorted(rows, key=lambda r: (r.key.name, r.key.module))
        elif sort == "total":
            ordered = sorted(rows, key=lambda r: (-r.total_samples, -r.self_samples, r.key.name))
        else:
            ordered = sorted(rows, key=lambda r: (-r.self_samples, -r.total_samples, r.key.name))
        return ordered[:limit] if limit is not None else ordered


def function_counts(samples: Iterable[Sample]) -> FunctionCounts:
    counts = FunctionCounts()
    counts.add(samples)
    return counts
