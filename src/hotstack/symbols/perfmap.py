"""JIT symbols from perf maps: `/tmp/perf-PID.map`, one `START SIZE NAME` line (hex) per code blob.

Node (`--perf-basic-prof`), Python 3.12+ (`-X perf`) and Java (`jcmd PID Compiler.perfmap`,
`-XX:+DumpPerfMapAtExit`) write them. The file is read inside the target's filesystem and
under its own pid (the pid in its namespace). It grows while the process runs, so it is read
again when its size or time changes; a later line for the same start address wins (code
memory is reused by the JIT). Size and line counts are capped: a hostile file cannot grow our
memory without bound.
"""

from __future__ import annotations

import os
import time

import numpy as np

MAX_MAP_BYTES = 256 << 20
MAX_LINE = 8192


def parse_perf_map(data: bytes) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(starts, sizes, names) sorted by start, one entry per start (the last line wins)."""
    starts: list[int] = []
    sizes: list[int] = []
    names: list[str] = []
    for line in data.splitlines():
        if len(line) > MAX_LINE:
            continue
        parts = line.split(None, 2)
        if len(parts) < 3:
            continue
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
        except ValueError:
            continue
        if not (0 < start < 1 << 64) or not (0 < size < 1 << 40) or start + size >= 1 << 64:
            continue
        starts.append(start)
        sizes.append(size)
        names.append(parts[2].strip().decode("utf-8", "replace"))
    if not starts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64), []
    s = np.array(starts, dtype=np.uint64)
    z = np.array(sizes, dtype=np.uint64)
    # Stable sort by start, then keep the last line of each start (the newest code there).
    order = np.argsort(s, kind="stable")
    s, z = s[order], z[order]
    last = np.append(s[1:] != s[:-1], True)
    keep = order[last]
    return s[last], z[last], [names[i] for i in keep.tolist()]


class PerfMap:
    """The perf map of one process, reloaded when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple | None = None
        self._checked_at = -1e9
        self.starts = np.zeros(0, np.uint64)
        self.sizes = np.zeros(0, np.uint64)
        self.names: list[str] = []
        self.error = ""
        self.loads = 0

    def refresh(self, min_interval: float = 0.0) -> bool:
        """Re-read the file if it changed; False when there is no map. With `min_interval`, the
        file is looked at no more often than that (stacks of a JIT process come by the thousand)."""
        now = time.monotonic()
        if min_interval and now - self._checked_at < min_interval:
            return bool(self.names)
        self._checked_at = now
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            self._stamp = None
            return bool(self.names)
        try:
            st = os.fstat(fd)
            if st.st_mode & 0o170000 != 0o100000:
                self.error = "not a regular file"
                return bool(self.names)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == self._stamp:
                return bool(self.names)
            size = min(st.st_size, MAX_MAP_BYTES)
            chunks = []
            left = size
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        except OSError as e:
            self.error = e.strerror or str(e)
            return bool(self.names)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if size < st.st_size:     # capped: drop the partial last line
            data = data[:data.rfind(b"\n") + 1]
            self.error = f"larger than {MAX_MAP_BYTES >> 20} MiB: read in part"
        self.starts, self.sizes, self.names = parse_perf_map(data)
        self._stamp = stamp
        self.loads += 1
        return bool(self.names)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def nbytes(self) -> int:
        return int(self.starts.nbytes + self.sizes.nbytes) + sum(49 + len(n) for n in self.names)

    def lookup_many(self, addresses: list[int]) -> list[str | None]:
        if not self.names or not addresses:
            return [None] * len(addresses)
        q = np.array(addresses, dtype=np.uint64)
        idx = np.searchsorted(self.starts, q, side="right") - 1
        out: list[str | None] = []
        for address, i in zip(addresses, idx.tolist()):
            if i >= 0 and address < int(self.starts[i]) + int(self.sizes[i]):
                out.append(self.names[i])
            else:
                out.append(None)
        return out
