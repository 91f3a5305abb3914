"""hotstack.local_store: profiles kept on this host, for people without a Pyroscope server.

Every pprof it receives is written to `directory/<service_name>/<time>-<pid>.pb.gz`; files
older than `retention` are removed (rotation). The last `window` of profiles is also kept in
memory as the profile viewer's slices (profile/ui.py), which the agent's page shows: a timeline
per service_name, flame graph, functions, time-range diffs.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque

from ...profile.model import Profile
from ...profile.ui import Slice, slices_from_profile
from ..component import Component, register
from ..schema import DURATION, INT, STRING, Arg, Schema
from .receiver import ProfilesReceiver

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def default_directory() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "hotstack", "profiles")


@register
class LocalStore(Component):
    name = "hotstack.local_store"
    schema = Schema([Arg("directory", STRING, ""), Arg("retention", DURATION, 3600.0),
                     Arg("window", DURATION, 900.0), Arg("max_files", INT, 5000)])
    initial_exports: dict = {}

    def __init__(self, controller, label):
        super().__init__(controller, label)
        self.receiver = ProfilesReceiver(self.id, self._append)
        self.exports = {"receiver": self.receiver}
        self._recent: deque[tuple[float, str, list[Slice]]] = deque()
        self._recent_lock = threading.Lock()
        self.files_written = 0
        self._last_rotate = 0.0
        controller.services.setdefault("local_store", self)

    def update(self, args: dict) -> None:
        args["directory"] = args["directory"] or default_directory()
        self.args = args

    def _append(self, labels: dict[str, str], raw: bytes, profile: Profile | None) -> bool:
        now = time.time()
        service = labels.get("service_name", "unspecified")
        pid = labels.get("__process_pid__", "") or labels.get("__container_id__", "")[:12]
        directory = os.path.join(self.args["directory"], _UNSAFE.sub("_", service) or "_")
        try:
            os.makedirs(directory, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{now % 1:.3f}"[1:]
            path = os.path.join(directory, f"{stamp}-{pid or 'all'}.pb.gz")
            with open(path + ".tmp", "wb") as f:
                f.write(raw)
            os.replace(path + ".tmp", path)
            self.files_written += 1
        except OSError as e:
            self.set_health("unhealthy", f"cannot write to {directory}: {e.strerror}")
            return False
        if profile is not None:
            # Kept as the viewer's slices (time span, labels, stacks): its timeline, label
            # filters and time-range diffs need them; the pprof files keep everything else.
            slices = slices_from_profile(profile, series="service_name", extra_labels=labels)
            with self._recent_lock:
                self._recent.append((now, service, slices))
                while self._recent and self._recent[0][0] < now - self.args["window"]:
                    self._recent.popleft()
        if now - self._last_rotate > 30:
            self._last_rotate = now
            self.rotate(now)
        return True

    def rotate(self, now: float | None = None) -> int:
        """Remove files past retention (and the oldest beyond max_files)."""
        now = now or time.time()
        removed = 0
        files = []
        for root, _, names in os.walk(self.args["directory"]):
            for n in names:
                if n.endswith(".pb.gz"):
                    p = os.path.join(root, n)
                    try:
                        files.append((os.stat(p).st_mtime, p))
                    except OSError:
                        pass
        files.sort()
        excess = max(0, len(files) - self.args["max_files"])
        for i, (mtime, p) in enumerate(files):
            if i < excess or mtime < now - self.args["retention"]:
                try:
                    os.unlink(p)
                    removed += 1
                except OSError:
                    pass
        return removed

    def services(self) -> list[str]:
        with self._recent_lock:
            return sorted({s for _, s, _ in self._recent})

    def slices(self, service: str, minutes: float) -> list[Slice]:
        """The viewer's slices received in the last `minutes` (of one service, or all)."""
        since = time.time() - minutes * 60
        with self._recent_lock:
            return [sl for t, s, slices in self._recent if t >= since and (not service or s == service)
                    for sl in slices]

    def debug_info(self) -> dict:
        return {"directory": self.args.get("directory", ""), "files_written": self.files_written,
                "services": self.services()}
