"""Totals of stacks per function name: a profile's samples, a folded text (`a;b;c 12` a line)."""

from __future__ import annotations

from typing import Iterable, Sequence


def totals_by_name(stacks: Iterable[tuple[Sequence[str], int]], names: Sequence[str]) -> dict[str, int]:
    """For each of `names`, the sum of the values of the stacks that hold it anywhere; `stacks` are
    (frame names, value) pairs."""
    totals = dict.fromkeys(names, 0)
    for frames, value in stacks:
        for name in names:
            if name in frames:
                totals[name] += value
    return totals


def folded_stacks(text: str) -> list[tuple[list[str], int]]:
    """The (frame names, value) pairs of a folded text: `frame;frame;frame value` a line."""
    stacks = []
    for line in text.splitlines():
        stack, _, value = line.rpartition(" ")
        stacks.append((stack.split(";"), int(value)))
    return stacks
