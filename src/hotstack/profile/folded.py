"""Folded stacks (Brendan Gregg's format): `comm;root;...;leaf COUNT`.

Readable by flamegraph.pl, inferno and speedscope. Kernel frames come after user
frames (they are nearer the leaf) and carry the `_[k]` suffix.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from .model import Profile, Sample


def folded_key(sample: Sample) -> str:
    parts = [_clean(sample.comm or "?")]
    for frame in reversed(sample.stack):
        parts.append(_clean(frame.name) + ("_[k]" if frame.is_kernel else ""))
    return ";".join(parts)


def _clean(name: str) -> str:
    # ';' separates frames and the last ' ' separates the count: neither may appear in a name.
    return name.replace(";", ":").replace("\n", " ")


def fold(samples: Iterable[Sample]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for sample in samples:
        counts[folded_key(sample)] += sample.value
    return counts


def render_folded(profile: Profile) -> str:
    counts = fold(profile.samples)
    return "".join(f"{key} {count}\n" for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
