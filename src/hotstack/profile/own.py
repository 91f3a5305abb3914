"""The profiler's own samples, folded into one row.

On a quiet host most of what a whole-host profile sees is the profiler itself (building unwind
tables, symbolizing): true, but not what anyone ran it for. Whole-host views pass the
profiler's pids here; each of its samples keeps its value, thread and process (so totals and
per-process counts stay exact) but its stack becomes one frame, OWN_FRAME_NAME. Full stacks
are one flag away (`--show-hotstack`).
"""

from __future__ import annotations

from collections.abc import Collection

from .model import Frame, FrameKind, Profile, Sample

OWN_FRAME_NAME = "hotstack (this profiler; --show-hotstack for its stacks)"
OWN_FRAME = Frame(OWN_FRAME_NAME, FrameKind.NATIVE, module="hotstack", resolved=False)


def fold_own(samples: list[Sample], own_pids: Collection[int]) -> list[Sample]:
    """`samples` with those of `own_pids` reduced to the single OWN_FRAME (same value, pid, tid)."""
    if not own_pids:
        return samples
    return [Sample((OWN_FRAME,), s.value, s.pid, s.tid, s.comm, s.labels) if s.pid in own_pids else s
            for s in samples]


def fold_own_profile(profile: Profile, own_pids: Collection[int]) -> Profile:
    """A copy of `profile` whose own samples are folded (the profile itself is not changed)."""
    return Profile(samples=fold_own(profile.samples, own_pids), start_ns=profile.start_ns,
                   duration_ns=profile.duration_ns, frequency_hz=profile.frequency_hz, name=profile.name,
                   sample_type=profile.sample_type, period_type=profile.period_type, stats=profile.stats)
