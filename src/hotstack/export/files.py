"""File outputs: pprof (gzipped profile.proto), flame graph HTML, folded stacks.

A file sink merges every interval it is given into one profile and rewrites the file after each
one (atomically: write beside it, then rename), so the file is complete whenever a run stops.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from ..errors import ConfigError, HotstackError
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
        if target.is_dir():
            raise ConfigError(f"--file {path}: is a directory (give a file name)")
        if target.exists() and not target.is_file():
            # The file is replaced by a rename: never do that to a device, a socket or a pipe.
            raise ConfigError(f"--file {path}: not a regular file")
        if target.exists() and not os.access(target, os.W_OK):
            raise ConfigError(f"--file {path}: not writable")
        self.path = target
        self.fmt = fmt
        self.profile: Profile | None = None
        self.written = 0          # samples in the file as it is on disk now
        # Before sampling starts: a file we could not write would only fail after the run.
        self._probe_directory()

    def _probe_directory(self) -> None:
        """Create and remove a file beside the target: the write at the end is a rename there."""
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        except OSError as e:
            raise ConfigError(f"--file {self.path}: cannot write in {str(self.path.parent)!r}: "
                              f"{e.strerror}") from None
        os.close(fd)
        os.unlink(tmp)

    def __call__(self, profile: Profile) -> None:
        self.profile = merge(self.profile, profile)
        self.write()

    def write(self) -> None:
        """Rewrite the file; a failure is one line (HotstackError) and the old file stays whole."""
        profile = self.profile or Profile(samples=[], start_ns=0, duration_ns=0, frequency_hz=0)
        data = RENDERERS[self.fmt](profile)
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except OSError as e:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise HotstackError(f"--file {self.path}: write failed: {e.strerror or e}") from None
        except BaseException:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise
        self.written = profile.total

    def finish(self, write_empty_file: bool = True) -> str | None:
        """The last write at the end of a run; the line to tell the user, or None (nothing written)."""
        if self.profile is None and not write_empty_file:
            return None
        self.write()     # raises when it fails: never claim a write that did not happen
        return f"hotstack: wrote {self.path} ({self.written} samples)"
