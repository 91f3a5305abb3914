"""The lifecycle every profiler shares: the interval loop, stop and close, the context manager.

A profiler provides `start()`, `collect() -> Profile`, a `session` with `stop()`/`close()`, a
`_stop` event and an optional `_watcher` thread; this base class adds the rest, once.
"""

from __future__ import annotations

import threading
import time

from ..profile.model import Profile


class IntervalProfiler:
    session: object
    _stop: threading.Event
    _watcher: threading.Thread | None = None

    def start(self) -> None:   # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def collect(self) -> Profile:   # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=1)
        self.session.stop()

    def close(self) -> None:
        self.stop()
        self.session.close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, duration_s: float, interval_s: float = 0, on_profile=None,
            stop: threading.Event | None = None) -> Profile | None:
        """Collect for `duration_s` (0 = until `stop`), emitting a profile every `interval_s`
        (0 = one at the end). Returns the last profile."""
        stop = stop or threading.Event()
        deadline = time.monotonic() + duration_s if duration_s > 0 else None
        last = None
        while True:
            wait = [interval_s] if interval_s > 0 else []
            if deadline is not None:
                wait.append(max(0.0, deadline - time.monotonic()))
            finished = stop.wait(min(wait)) if wait else stop.wait()
            expired = deadline is not None and time.monotonic() >= deadline
            if finished or expired:
                self.session.stop()   # flush on stop: nothing may arrive after the final drain
            if finished or expired or interval_s > 0:
                last = self.collect()
                if on_profile is not None:
                    on_profile(last)
            if finished or expired:
                return last
