"""Folded stacks (Brendan Gregg's format): `comm;root;...;leaf COUNT`.

Readable by flamegraph.pl, inferno and speedscope. Kernel frames come after user
frames (they are nearer the leaf) and carry the `_[k]` suffix.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from .model import Profile, Sample


def folded_key(sample: Sample, comm: bool = True, kernel_suffix: str = "_[k]", empty: str = "") -> str:
    """`comm;root;...;leaf` for a sample: `comm` puts the command name first; kernel frames end in
    `kernel_suffix`; a sample with nothing to show reads `empty`."""
    parts = [_clean(sample.comm or "?")] if comm else []
    for frame in reversed(sample.stack):
        parts.append(_clean(frame.name) + (kernel_suffix if frame.is_kernel else ""))
    return ";".join(parts) or empty


def _clean(name: str) -> str:
    # ';' separates frames and the last ' ' separates the count: neither may appear in a name.
    return name.replace(";", ":").replace("\n", " ")


def fold(samples: Iterable[Sample], comm: bool = True, kernel_suffix: str = "_[k]", empty: str = "") -> Counter[str]:
    """The one fold: samples -> Counter of folded stacks (see folded_key for the options)."""
    counts: Counter[str] = Counter()
    for sample in samples:
        counts[folded_key(sample, comm, kernel_suffix, empty)] += sample.value
    return counts


def render_folded(profile: Profile) -> str:
    counts = fold(profile.samples)
    return "".join(f"{key} {count}\n" for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
