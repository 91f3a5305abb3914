"""File outputs: pprof (gzipped profile.proto), flame graph HTML, folded stacks.

A file sink merges every interval it is given into one profile and rewrites the file after each
one (atomically: write beside it, then rename), so the file is complete whenever a run stops.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from ..errors import ConfigError
from ..profile.flamegraph import render_flamegraph
from ..profile.folded import render_folded
from ..profile.model import Profile
from ..profile.pprof import encode_pprof

RENDERERS: dict[str, Callable[[Profile], bytes]] = {
    "pprof": lambda p: encode_pprof(p, compress=True),
    "flamegraph": lambda p: render_flamegraph(p).encode(),
    "folded": lambda p: render_folded(p).encode(),
}
FORMATS = tuple(RENDERERS)


def merge(into: Profile | None, p: Profile) -> Profile:
    """One profile covering both intervals (samples appended; encoders merge equal stacks)."""
    if into is None:
        into = Profile(samples=list(p.samples), start_ns=p.start_ns, duration_ns=p.duration_ns,
                       frequency_hz=p.frequency_hz, name=p.name, sample_type=p.sample_type,
                       period_type=p.period_type)
        into.stats.add(p.stats)
        return into
    end = max(into.start_ns + into.duration_ns, p.start_ns + p.duration_ns)
    into.samples.extend(p.samples)
    into.start_ns = min(into.start_ns, p.start_ns)
    into.duration_ns = end - into.start_ns
    into.stats.add(p.stats)
    return into


class ProfileFile:
    def __init__(self, path: str, fmt: str) -> None:
        if fmt not in RENDERERS:
            raise ConfigError(f"file format {fmt!r}: expected one of {', '.join(FORMATS)}")
        target = Path(path)
        if not target.parent.is_dir():
            raise ConfigError(f"--file {path}: directory {str(target.parent)!r} does not exist")
        self.path = target
        self.fmt = fmt
        self.profile: Profile | None = None

    def __call__(self, profile: Profile) -> None:
        self.profile = merge(self.profile, profile)
        self.write()

    def write(self) -> None:
        profile = self.profile or Profile(samples=[], start_ns=0, duration_ns=0, frequency_hz=0)
        data = RENDERERS[self.fmt](profile)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
