"""glibc malloc settings for a long-running profiler, and giving freed memory back.

With glibc's defaults, much of hotstack's resident memory past start-up is memory that malloc keeps
after it is freed, not live objects (on the mixed load of bench/otel_profiler.py, tracemalloc sees
~35 MB live where RSS is 90-120 MB). Two causes:
- every thread that allocates (kallsyms, the pid watcher, the unwind thread, the reader) gets an
  arena of its own, and freed blocks in one arena serve no other: one arena is enough (the GIL
  serializes nearly all of our allocations anyway);
- a large transient (an unwind table's build: ~100 MB of numpy columns for a 1M-row library) is
  carved from the heap once glibc's mmap threshold has grown past its blocks, and its pages stay
  resident after it is freed: trim() hands them back once the work is done.
A fixed 128 KiB mmap threshold would give them back by itself, but each new array then costs
fresh page faults: it doubles the CPU of building a large library's table (0.54 -> 1.2 CPU-s).

Another libc (musl) has no mallopt/malloc_trim: nothing is changed there.
"""

from __future__ import annotations

import ctypes

M_ARENA_MAX = -8

_libc = None


def _c():
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None)     # the interpreter's own libc (no ldconfig search)
        except OSError:
            _libc = False
    return _libc


def tune() -> bool:
    """One malloc arena for every thread; call before threads start (True where libc took it)."""
    libc = _c()
    mallopt = getattr(libc, "mallopt", None) if libc else None
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(M_ARENA_MAX, 1) == 1        # mallopt returns 1 on success


def trim() -> None:
    """Give the free pages of malloc's heap back to the system (after a large transient; a few
    hundred microseconds on our heap)."""
    libc = _c()
    malloc_trim = getattr(libc, "malloc_trim", None) if libc else None
    if malloc_trim is not None:
        malloc_trim.argtypes = (ctypes.c_size_t,)
        malloc_trim(0)
