"""RLIMIT_MEMLOCK on kernels that charge BPF memory to it (before 5.11).

Those kernels count every map's memory against the user's locked-memory limit (often 64 KiB
or 8 MiB), and map creation fails with EPERM past it. As root, the loader raises the limit by
what the maps about to be created need (their estimated size, plus slack), the way every
peer profiler does, and says so once. Only if raising is refused is that an error, in one line.
Kernels that charge memory cgroups instead (5.11+, probed: features.memcg_accounting) are
left alone.
"""

from __future__ import annotations

import logging
import resource

from . import features
from .errors import EbpfError
from .maps import possible_cpus
from .spec import MapSpec

log = logging.getLogger("hotstack.ebpf")

_PERCPU_TYPES = {5, 6, 10}
_RINGBUF = 27
_ELEMENT_OVERHEAD = 64        # hash/LRU element header, list links, bucket slot (upper bound)
_PROGRAM_ALLOWANCE = 1 << 20  # program images are charged too: a generous allowance per collection
_SLACK = 8 << 20
_told = False   # said once per process; later raises (more collections) only at info level


def estimate(maps: list[MapSpec]) -> int:
    """Upper estimate of the bytes the kernel charges for creating these maps."""
    total = _PROGRAM_ALLOWANCE
    ncpu = None
    for m in maps:
        if m.type == _RINGBUF:
            total += m.max_entries + 3 * 4096
            continue
        value = (m.value_size + 7) & ~7
        if m.type in _PERCPU_TYPES:
            ncpu = ncpu or possible_cpus()
            value *= ncpu
        total += m.max_entries * (((m.key_size + 7) & ~7) + value + _ELEMENT_OVERHEAD)
    return total


def ensure(maps: list[MapSpec]) -> None:
    """Make room under RLIMIT_MEMLOCK for `maps` where the kernel charges BPF memory to it."""
    global _told
    if features.memcg_accounting():
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY:
        return
    need = estimate(maps) + _SLACK
    # The limit is shared with everything the user has locked already (other maps included):
    # add what these maps need on top of it rather than guess what is in use.
    target = soft + need
    new_hard = hard if hard == resource.RLIM_INFINITY or hard >= target else target
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (target, new_hard))
    except (ValueError, OSError):
        raise EbpfError(
            f"RLIMIT_MEMLOCK is {soft // 1024} KiB and raising it by the {need >> 20} MiB the BPF maps need was "
            "refused (this kernel charges BPF memory to it; 5.11 moved that to memory cgroups): run as root, "
            "or `ulimit -l unlimited`, or LimitMEMLOCK=infinity") from None
    (log.warning if not _told else log.info)("raised RLIMIT_MEMLOCK from %d KiB to %d MiB for the BPF maps (this kernel charges BPF memory "
                "to it; 5.11 moved that to memory cgroups)", soft // 1024, target >> 20)
    _told = True


__all__ = ["estimate", "ensure"]
