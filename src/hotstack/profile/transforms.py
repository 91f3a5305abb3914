"""Pure Profile -> Profile transforms (and a split into several): nothing here changes its input.

Front doors compose them before encoding: the agent stubs unsymbolized frames, adds the command
name as a root frame and splits by target; the local store merges what it keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import replace

from .model import Frame, FrameKind, Profile, ProfileStats, Sample


def _with_samples(profile: Profile, samples: list[Sample]) -> Profile:
    return replace(profile, samples=samples, stats=ProfileStats())


def map_samples(profile: Profile, f: Callable[[Sample], Sample | None]) -> Profile:
    """Each sample through `f` (None drops it). The counters stay with the original."""
    out = []
    for s in profile.samples:
        s = f(s)
        if s is not None:
            out.append(s)
    return replace(profile, samples=out)


def stub_unsymbolized(profile: Profile) -> Profile:
    """Frames without a symbol but with a file read `$ FILE + 0xADDR` (pyroscope.ebpf's
    reporter_unsymbolized_stubs), so that one file's unknown frames stay apart."""
    def stub(frame: Frame) -> Frame:
        if frame.resolved or not frame.module:
            return frame
        return replace(frame, name=f"$ {frame.module} + 0x{frame.address:x}")
    return map_samples(profile, lambda s: s._replace(stack=tuple(stub(f) for f in s.stack)))


def comm_as_frame(profile: Profile) -> Profile:
    """The thread's command name as the root frame of each stack."""
    return map_samples(profile, lambda s: s._replace(stack=s.stack + (Frame(s.comm, module="comm"),)))


def keep_labels(profile: Profile, keys: Iterable[str]) -> Profile:
    """Samples keep only the labels named (e.g. trace_id/span_id once a split has used the rest)."""
    wanted = frozenset(keys)
    return map_samples(profile, lambda s: s._replace(labels=tuple(kv for kv in s.labels if kv[0] in wanted)))


def split(profile: Profile, key: Callable[[Sample], Hashable | None]) -> dict[Hashable, Profile]:
    """One Profile per key of its samples, in order of first appearance; samples keyed None go."""
    groups: dict[Hashable, list[Sample]] = {}
    for s in profile.samples:
        k = key(s)
        if k is not None:
            groups.setdefault(k, []).append(s)
    return {k: _with_samples(profile, samples) for k, samples in groups.items()}


def merge(profiles: Iterable[Profile]) -> Profile | None:
    """One Profile of several of the same kind: samples of the same stack and thread add up; the
    interval covers them all. None for none."""
    profiles = list(profiles)
    if not profiles:
        return None
    first = profiles[0]
    merged: dict[tuple, Sample] = {}
    stats = ProfileStats()
    for p in profiles:
        stats.add(p.stats)
        for s in p.samples:
            k = (s.stack, s.pid, s.tid, s.comm, s.labels)
            found = merged.get(k)
            merged[k] = s if found is None else found._replace(value=found.value + s.value)
    start = min(p.start_ns for p in profiles)
    end = max(p.start_ns + p.duration_ns for p in profiles)
    return replace(first, samples=list(merged.values()), start_ns=start, duration_ns=end - start, stats=stats)


# On a quiet host most of what a whole-host profile sees is the profiler itself (building unwind
# tables, symbolizing): true, but not what anyone ran it for.
OWN_FRAME = Frame("hotstack (this profiler; --show-hotstack for its stacks)", FrameKind.NATIVE, module="hotstack",
                  resolved=False)


def fold_own(profile: Profile, own_pids: Collection[int]) -> Profile:
    """Samples of `own_pids` (the profiler's) with their stack reduced to the one OWN_FRAME; value,
    thread and process kept, so totals and per-process counts stay exact."""
    if not own_pids:
        return profile
    return map_samples(profile, lambda s: s._replace(stack=(OWN_FRAME,)) if s.pid in own_pids else s)
