"""The Engine's background threads: how each runs under supervision, what a failure costs, and
the unwind thread's loop.

A thread that raises is logged, counted in `Engine.failures` and run again; after
THREAD_FAILURES failures the engine has failed (`Engine.failure`), and its next collect says so.
`EngineThreads` is a part of `Engine` (engine.py); it uses the engine's stop event, samplers,
symbolizer and failure counters.
"""

from __future__ import annotations

import logging
import threading

from .. import malloc

log = logging.getLogger("hotstack.engine")
THREAD_FAILURES = 5       # failures of one background thread before the engine gives up
ENGINE_THREADS = ("hotstack-kallsyms", "hotstack-pids", "hotstack-unwind")   # (the names _spawn gives)
# The unwind thread's look at the kernel's queues without a kick, this often: work queued comes with
# a record that wakes the pid watcher, which kicks it (a ring found full counts as one), so the look
# is a fallback. At once a second it would cost ~20 wake-ups and queue reads in 20 s, ~2.5 ms of
# CPU under load.
UNWIND_IDLE_WAIT_S = 10.0


class EngineThreads:
    """The supervision of the Engine's threads and the loops of two of them (the kernel's
    symbols, the unwind tables); the pid watcher's loop is in process_watch.py."""

    def _load_kernel_symbols(self) -> None:
        self.symbolizer.kernel        # (loaded under the symbolizer's lock: a collect waits for it)
        malloc.trim()                 # the parse's chunks go back

    def _spawn(self, target, name: str) -> None:
        thread = threading.Thread(target=self._supervised, args=(target, name), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _supervised(self, target, name: str) -> None:
        """Run a background thread's loop; one that raises is logged, counted and run again, after
        a pause that grows with each failure. After THREAD_FAILURES of them the engine has failed:
        its next collect raises EngineFailed, so that a front door ends (or starts again) instead
        of going on without new processes or unwind tables and saying nothing."""
        failures = 0
        while not self._stop.is_set():
            try:
                target()
                return
            except Exception as e:      # whatever it is: said, counted, and the thread runs again
                failures += 1
                self._count_failure(name, f"{type(e).__name__}: {e}")
                last = failures >= THREAD_FAILURES
                log.error("engine thread %s failed (%s: %s); %s", name, type(e).__name__, e,
                          "giving up: the engine stops" if last else "restarted")
                log.debug("engine thread %s failed", name, exc_info=True)
                if last:
                    self.failure = f"engine thread {name} failed {failures} times, last: {type(e).__name__}: {e}"
                    return
                self._stop.wait(min(0.1 * 2 ** failures, 2.0))

    def _count_failure(self, where: str, what: str) -> bool:
        """Count a failure inside the engine; True the first time this one (where, what) is met."""
        with self._failures_lock:
            self.failures[where] = self.failures.get(where, 0) + 1
            self._new_failures += 1
            first = (where, what) not in self._failures_seen
            self._failures_seen.add((where, what))
        return first

    def _serve_native_loop(self) -> None:
        """Tables for the files the kernel unwinder queued. Its own thread, apart from the pid
        watcher: a first parse of a large binary can take a second, and new processes' maps must
        be read before they exit all the same."""
        for sampler in self._started:
            try:
                sampler.preload_native_shared()
            except Exception:    # (not loaded now, the kernel queues them as it meets them)
                if sampler.collection is None:   # closing under us
                    return
        waiting = False
        while not self._stop.is_set():
            # files still waiting for a build go on at once; else the pid watcher's kick after a
            # round, or UNWIND_IDLE_WAIT_S
            kicked = waiting or self._native_kick.wait(UNWIND_IDLE_WAIT_S)
            if waiting:
                self._native_kick.clear()
            waiting = False
            for sampler in self._started:
                # at a timeout, a look at the queues first (one syscall a map): a serve reads them
                # whole, ~0.2 ms of CPU a second for nothing on a host where every file has its table
                if not kicked and not sampler.native_queued():
                    continue
                try:
                    waiting = sampler.serve_native() or waiting
                except Exception:
                    if sampler.collection is None:   # closing under us
                        return

