"""Folded stacks (Brendan Gregg's format): `comm;root;...;leaf COUNT`.

Readable by flamegraph.pl, inferno and speedscope. Kernel frames come after user
frames (they are nearer the leaf) and carry the `_[k]` suffix.
"""

from __future__ import annotations

from collections import Counter
from itertools import takewhile
from operator import attrgetter
from typing import Iterable

from .model import FrameKind, Profile, Sample

_NAME = attrgetter("name")
_KIND = attrgetter("kind")
_KERNEL = FrameKind.KERNEL


def folded_key(sample: Sample, comm: bool = True, kernel_suffix: str = "_[k]", empty: str = "") -> str:
    """`comm;root;...;leaf` for a sample: `comm` puts the command name first; kernel frames end in
    `kernel_suffix`; a sample with nothing to show reads `empty`.

    Made of C-level passes over the frames (names, kinds, one join), cleaned only when a name
    holds a separator: a Python step per frame (a deep Python stack has ~80) would make writing
    `-o folded` every few seconds about a tenth of the profiler's own CPU."""
    stack = sample.stack
    names = list(map(_NAME, reversed(stack)))       # root first
    if kernel_suffix and stack and stack[0].kind is _KERNEL:
        # a sample's kernel frames are its first (model.Sample: leaf first, kernel then user): most
        # samples have none, told by their leaf, with no pass over every frame's kind
        kernel = len(list(takewhile(_KERNEL.__eq__, map(_KIND, stack))))
        for i in range(len(names) - kernel, len(names)):
            names[i] += kernel_suffix
    if comm:
        names.insert(0, sample.comm or "?")
    text = ";".join(names)
    if "\n" in text or text.count(";") != len(names) - 1:
        text = ";".join(map(_clean, names))     # a name holds a separator (rare)
    return text or empty


def _clean(name: str) -> str:
    # ';' separates frames and the last ' ' separates the count: neither may appear in a name.
    return name.replace(";", ":").replace("\n", " ")


# The frames' part of folded keys, by the identity of the stack tuple: the engine gives every sample
# of a stack it named before the same tuple (sampling/samples.py). So the ~70% of an interval's samples
# that repeat a stack are folded with one dict lookup instead of a pass over their frames (a pass
# costs ~4 us a sample, a twentieth of the profiler's CPU under bench/otel_profiler.py's load).
# Each entry holds its tuple, so no other object can have its id while it is here; cleared when full.
_FOLDED_FRAMES: dict[tuple[int, str], tuple[tuple, str]] = {}
MAX_FOLDED_FRAMES = 8192


def _frames_text(stack: tuple, kernel_suffix: str) -> str:
    """`root;...;leaf` of a stack (names cleaned of separators), remembered by identity."""
    key = (id(stack), kernel_suffix)
    found = _FOLDED_FRAMES.get(key)
    if found is not None:
        return found[1]
    text = folded_key(Sample(stack, 0, 0, 0, ""), False, kernel_suffix)
    if len(_FOLDED_FRAMES) >= MAX_FOLDED_FRAMES:
        _FOLDED_FRAMES.clear()
    _FOLDED_FRAMES[key] = (stack, text)
    return text


def fold(samples: Iterable[Sample], comm: bool = True, kernel_suffix: str = "_[k]", empty: str = "") -> Counter[str]:
    """The one fold: samples -> Counter of folded stacks (see folded_key for the options)."""
    counts: Counter[str] = Counter()
    for sample in samples:
        if not comm or not sample.stack:
            counts[folded_key(sample, comm, kernel_suffix, empty)] += sample.value
            continue
        name = sample.comm or "?"
        if ";" in name or "\n" in name:
            name = _clean(name)
        counts[name + ";" + _frames_text(sample.stack, kernel_suffix)] += sample.value
    return counts


def render_folded(profile: Profile) -> str:
    counts = fold(profile.samples)
    return "".join(f"{key} {count}\n" for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
