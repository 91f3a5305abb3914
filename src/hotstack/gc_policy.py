"""The cyclic garbage collector's thresholds for a long-running profiler.

CPython's defaults (700, 10, 10) run a young collection every 700 container allocations. Naming
samples allocates tuples, lists and frames by the hundred thousand per interval, nearly none of
them in reference cycles, so most of those collections find nothing: on the mixed load of
bench/otel_profiler.py at 99 Hz, 9% of the process's samples are inside the collector
(gc_collect_main) with the defaults. Thresholds of (20000, 50, 50) cost 0.97-1.10% of a core
where the defaults cost 1.10-1.27%. Cycles are still collected: a young
collection runs every 20,000 allocations (a few times a second while sampling), an older one
every 50 of those.
"""

from __future__ import annotations

import gc

THRESHOLDS = (20_000, 50, 50)


def tune() -> None:
    gc.set_threshold(*THRESHOLDS)
