"""RawStack -> Sample: symbols, runtime frames and labels, in one place for every sampler."""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from itertools import repeat
from operator import attrgetter, is_

from .. import procs
from ..procs import ProcessTable
from ..profile.model import LOST_KERNEL, LOST_USER, TRUNCATED, UNKNOWN, Frame, Sample
from ..symbols.symbolizer import Symbolizer
from ..unwind.kernel_files import file_stack_hash
from ..runtimes.registry import FrameSource
from .buffers import NU_END_INVALID, NU_END_NO_MAPPING, NU_END_TRUNCATED, RawStack
from .obi import trace_labels

# The leaf frames of a stack taken inside a BPF program are the program and its dispatcher.
_BPF_FRAME_PREFIXES = ("bpf_prog_", "bpf_trace_run", "__bpf_trace_", "bpf_trampoline_")


def without_bpf_frames(frames: list[Frame]) -> list[Frame]:
    skip = 0
    while skip < len(frames) - 1 and frames[skip].name.startswith(_BPF_FRAME_PREFIXES):
        skip += 1
    return frames[skip:]


_RESOLVED = attrgetter("resolved")
# Named stacks kept for reuse: a few hundred bytes each, the frames themselves shared with the
# symbolizer's caches; at most this many of each kind, the least recently used going first.
MAX_NAMED_STACKS = 20_000
# ... and until this many intervals have passed without them. A busy process's stacks recur over
# more than two intervals: under the mixed load of bench/otel_profiler.py a Python recursion's
# stacks named again because they were last met 2-12 intervals before were as many as those met in
# the last one (65-78 against 70 a 5 s interval, with 41-46 truly new). Each of them named again
# costs a symbolizer pass or a runtime merge (30-70 us).
KEEP_INTERVALS = 12
# A process that put another file where one was (ProcessTable.reread) has its stacks checked against
# the kernel's hash until an interval begins this long after its maps were read again: samples
# taken before the reread are named with the mappings before it where those are the ones walked.
REMAP_SETTLED_S = 1.0


def _without_unmapped_root(user):
    """The frames of a walk that ended at an address in no mapping the kernel knew, without that
    address where it is in none userspace knows either: past the leaf, a return address read from
    where no frame was (a frame-pointer step through code that keeps another value in rbp: 0x10).
    One in a mapping (a library the kernel's lookup missed while the process remapped) is named
    and stays; so does a leaf, the thread's own address."""
    last = user[-1]
    if len(user) > 1 and last.name == UNKNOWN and not last.module:
        return user[:-1]
    return user


class RecentlyUsed:
    """A map of what was used in the last `intervals` intervals, at most `size` entries: the least
    recently used goes first when full, and what was not used for `intervals` intervals goes at the
    next one. An OrderedDict keeps the order of use (an entry moves to the end at each use), so both
    evictions take the oldest entries from its front, O(1) each."""

    def __init__(self, size: int = MAX_NAMED_STACKS, intervals: int = KEEP_INTERVALS) -> None:
        self._items: OrderedDict[Hashable, list] = OrderedDict()     # key -> [interval of last use, value]
        self._size = size
        self._intervals = intervals
        self._now = 0

    def get(self, key: Hashable):
        item = self._items.get(key)
        if item is None:
            return None
        item[0] = self._now
        self._items.move_to_end(key)
        return item[1]

    def put(self, key: Hashable, value) -> None:
        items = self._items
        if key in items:
            items.move_to_end(key)
        elif len(items) >= self._size:
            items.popitem(last=False)
        items[key] = [self._now, value]

    def next_interval(self) -> None:
        self._now += 1
        items, oldest = self._items, self._now - self._intervals
        while items:
            first = next(iter(items))
            if items[first][0] >= oldest:
                break
            del items[first]

    def __len__(self) -> int:
        return len(self._items)


def _file_hash_matches(raw: RawStack, mappings) -> bool:
    """Whether the kernel walked raw's stack of files with these mappings (procs.MappingIndex): its
    file hash is the one they give its addresses."""
    return raw.user_hash == file_stack_hash(mappings, raw.user_stack, raw.user_end)


class SampleMaker:
    """Samples from raw stacks. A process's user stack (with its runtime frames) that recurs within
    KEEP_INTERVALS intervals is named once: the symbolizer's per-address pass and a runtime's
    merge cost ~20-50 us a key under load, and a Python process's stacks recur, each under a key
    per thread and kernel stack."""

    def __init__(self, symbolizer: Symbolizer, processes: ProcessTable, runtimes: Sequence[FrameSource]) -> None:
        self.symbolizer = symbolizer
        self.processes = processes
        self.runtimes = list(runtimes)
        # (pid, user addresses, runtime key) -> (process entry, its mappings (held: the id of a freed
        # index could be a new one's), frames, truncated, native frames named, not named); only
        # stacks whose every frame is named as it will stay, merged by a source whose merge
        # depends on nothing else (one with a `final_merge`)
        self._named = RecentlyUsed()
        # native frames of stacks the kernel hashed by (file, file offset) per frame, by that hash:
        # (frames, named, not named). Their names depend on nothing else, so another process's
        # stack of the same files (a loop of short commands: each run a new process at new
        # addresses) is named once, not once per process
        self._by_file = RecentlyUsed()
        # the same for a stack's callers (every frame but the leaf), by the kernel's hash of them:
        # (frames, named, not named). A stack new only by its leaf (a hot function's every
        # instruction is a leaf in turn), in any process of those files, is named from its callers'
        # frames and its leaf's file offset (Symbolizer.file_leaf_frame): no mappings of its process
        # read (a short command's, gone by then) and no pass over its frames
        self._by_callers = RecentlyUsed()
        self._began = time.monotonic()      # when the interval being named began

    def next_interval(self) -> None:
        """After an interval's samples: what was not used for KEEP_INTERVALS intervals goes."""
        self._named.next_interval()
        self._by_file.next_interval()
        self._by_callers.next_interval()
        self._began = time.monotonic()

    def sample(self, raw: RawStack, strip_bpf: bool) -> tuple[Sample, bool]:
        """(the sample, whether a runtime stack in it was truncated)."""
        info = self.processes.get(raw.pid) if raw.pid else None
        user, truncated = self._user(raw, info) if raw.user_stack else ((), False)
        if user and raw.user_end in (NU_END_TRUNCATED, NU_END_NO_MAPPING, NU_END_INVALID):
            # the kernel's walk reached its frame limit (or a deep stack's tail found no room), an
            # address in no mapping the kernel knew, or code whose frame is not known (neither CFI
            # nor a frame pointer: unwind/code_rows.py)
            if raw.user_end == NU_END_NO_MAPPING:
                user = _without_unmapped_root(user)
            user, truncated = (*user, TRUNCATED), True
        if user and not raw.kernel_stack and not raw.kernel_stack_lost:
            # a user stack alone (most samples): the named stack as kept (a tuple), shared by every
            # sample of it, which encoders can tell by identity (profile/folded.py)
            stack = user if type(user) is tuple else tuple(user)
        else:
            parts: list[Frame] = []
            if raw.kernel_stack:
                kernel = self.symbolizer.kernel_frames(list(raw.kernel_stack))
                parts.extend(without_bpf_frames(kernel) if strip_bpf else kernel)
            elif raw.kernel_stack_lost:
                parts.append(LOST_KERNEL)
            if user:
                parts.extend(user)
            elif raw.user_stack_lost:
                parts.append(LOST_USER)
            stack = tuple(parts)
        labels = (("container_id", info.container_id),) if info is not None and info.container_id else ()
        labels += trace_labels(raw.trace_id, raw.span_id)
        return Sample(stack, raw.value, raw.pid, raw.tid, raw.comm, labels), truncated

    def _user(self, raw: RawStack, info) -> tuple[list[Frame], bool]:
        """The user frames of a sample, runtime frames merged in; (frames, truncated). The native
        frames are named with the process whose addresses the stack holds (raw.user_pid: another
        process of the same files may have stored it), the runtime frames with the sample's."""
        owner = raw.user_pid or raw.pid
        owner_info = info if owner == raw.pid else self.processes.get(owner)
        if owner_info is not None and owner_info.remapped_at:
            if owner_info.remapped_at >= self._began - REMAP_SETTLED_S:
                return self._user_remapped(raw, info, owner, owner_info)
            owner_info.earlier, owner_info.changed, owner_info.remapped_at = (), (), 0.0
        native_key = (owner, raw.user_stack, 0)
        key = (raw.pid, owner, raw.user_stack, raw.runtime_stack) if raw.runtime_stack else native_key
        named = self._reuse(key, info if raw.runtime_stack else owner_info)
        if named is not None:
            return named
        # a runtime stack met for the first time is most often above native frames met before
        named = self._reuse(native_key, owner_info) if raw.runtime_stack else None
        if named is not None:
            user, final = named[0], True
        else:
            user, final = self._native(raw, owner, owner_info, native_key)
        return self._merged(raw, info, user, final, key)

    def _native(self, raw: RawStack, owner: int, owner_info, native_key: tuple) -> tuple[list[Frame], bool]:
        """(native frames, final) of a stack not named in this process before: by the kernel's
        file-and-offset hash where it has one and another process's stack of it was named."""
        named = self._named_by_file(raw)
        if named is not None:
            return named, True
        named = self._named_by_callers(raw)
        if named is not None:
            self._keep_by_file(raw, named)
            return named, True
        parent = self._forked_from(raw, owner_info)
        if parent is not None:
            # (kept by its file hash only: the process's own maps do not name these addresses)
            user, final = self.symbolizer.final_user_frames(parent.pid, list(raw.user_stack), parent)
            if final:
                user = tuple(user)
                self._keep_by_file(raw, user)
            return user, final
        user, final = self.symbolizer.final_user_frames(owner, list(raw.user_stack))
        if not final and raw.user_end == NU_END_NO_MAPPING and len(raw.user_stack) == 1:
            return self._leaf_before_exec(raw, owner_info, user), False
        if not final and raw.user_hash and owner_info is not None and owner_info.settled_gone:
            # (every frame was in a file when the kernel walked it: a mapping it kept was lost)
            self.processes.note_hole(owner_info)
        if final:
            user = tuple(user)      # (kept as a tuple: see _keep)
            self._keep(native_key, owner_info, user, False, user)
            self._keep_by_file(raw, user)
        return user, final

    def _leaf_before_exec(self, raw: RawStack, info, user: list[Frame]) -> list[Frame]:
        """The leaf of a thread whose address space has none of its address: a process in its
        execve, past the switch to the new image, whose registers are still the old image's (its
        call of execve). A child forked and not exec'ed before runs its parent's image, mapped at
        the same addresses: named with the parent's mappings where one of its files holds the
        address (a process gone before it was read: the parent its announcement named); else as
        the process's own maps name it ([unknown])."""
        ppid = (info.ppid if info is not None else 0) or self.processes.gone_parent(raw.pid)
        parent = self.processes.get(ppid) if ppid > 1 else None
        if parent is None:
            return user
        if parent.lazy:
            self.processes.settle(parent)
        mapping = parent.mappings.find(raw.user_stack[0])
        if mapping is None or not mapping.is_file:
            return user
        named, final = self.symbolizer.final_user_frames(parent.pid, list(raw.user_stack), parent)
        return named if final else user

    def _forked_from(self, raw: RawStack, info):
        """The parent of a process sampled between its fork and its exec (a shell's child running
        the shell's code), when that is where raw was walked: the process was read after its exec,
        its maps name none of those addresses, and its parent's do (the kernel's file hash says
        so). Else None. Looked for only under another comm than the process's now, by file hash."""
        if info is None or not info.ppid or not raw.user_hash or raw.comm == info.comm:
            return None
        if info.lazy:
            self.processes.settle(info)
        if _file_hash_matches(raw, info.mappings):
            return None       # (its own: a thread's name)
        parent = self.processes.get(info.ppid)
        if parent is not None and parent.lazy:
            self.processes.settle(parent)
        return parent if parent is not None and _file_hash_matches(raw, parent.mappings) else None

    def _named_by_file(self, raw: RawStack) -> list[Frame] | None:
        """The native frames named for raw's file hash within KEEP_INTERVALS intervals, if any."""
        if not raw.user_hash:
            return None
        named = self._by_file.get(raw.user_hash)
        if named is None or len(named[0]) != len(raw.user_stack):
            return None
        self.symbolizer.stats.hits += named[1]
        self.symbolizer.stats.misses += named[2]
        return named[0]

    def _named_by_callers(self, raw: RawStack) -> tuple[Frame, ...] | None:
        """The native frames of a stack whose callers (by the kernel's hash of them) were named within
        KEEP_INTERVALS intervals, its leaf named from its file offset; None if either is not."""
        if not raw.user_callers:
            return None
        callers = self._by_callers.get(raw.user_callers)
        if callers is None or len(callers[0]) != len(raw.user_stack) - 1:
            return None
        leaf = self.symbolizer.file_leaf_frame(raw.leaf_ino, raw.leaf_dev, raw.leaf_offset)
        if leaf is None:
            return None
        self.symbolizer.stats.hits += callers[1]
        self.symbolizer.stats.misses += callers[2]
        return (leaf, *callers[0])

    def _keep_by_file(self, raw: RawStack, user: tuple[Frame, ...]) -> None:
        """Remember native frames named as they will stay under raw's file hash (if it has one), and
        its callers' under their hash."""
        if raw.user_hash:
            resolved = sum(map(_RESOLVED, user))
            self._by_file.put(raw.user_hash, (user, resolved, len(user) - resolved))
            if raw.user_callers and len(user) > 1:
                leaf = 1 if user[0].resolved else 0
                self._by_callers.put(raw.user_callers, (user[1:], resolved - leaf, len(user) - resolved - 1 + leaf))

    def _user_remapped(self, raw: RawStack, info, owner: int, owner_info) -> tuple[list[Frame], bool]:
        """The user frames of a process whose addresses meant other code a moment ago: named with
        the mappings the kernel walked them in (read now, or earlier: the stack's hash tells).
        Where neither is (the process changed its mappings and back between two reads), or the
        stack has no file hash to tell (a frame in the vDSO or JIT code), they are named with what
        did not change. The ranges the kernel saw change, and the mappings that differ between the
        two reads, are left unnamed rather than named as another file's code. Not kept for reuse by
        address: the same addresses are two stacks here (by the file hash they are one)."""
        named = self._named_by_file(raw)
        if named is not None:
            return self._merged(raw, info, named, False, None)
        walked_in = self._walked_in(raw, owner_info)
        if walked_in is None:
            # (a stack of an image whose mappings were not read, a process that execs itself
            # again and again: named where its callers were, by their hash, and its leaf's file)
            named = self._named_by_callers(raw)
            if named is not None:
                self._keep_by_file(raw, named)
                return self._merged(raw, info, named, False, None)
        if walked_in is None:
            kept = {m.span for m in owner_info.earlier[0].mappings} if owner_info.earlier else None
            same = [m for m in owner_info.mappings.mappings
                    if (kept is None or m.span in kept)
                    and not any(m.start < end and start < m.end for start, end in owner_info.changed)]
            chosen = dataclasses.replace(owner_info, mappings=procs.MappingIndex(same), earlier=(), alive=False)
        else:
            chosen = walked_in
        user, final = self.symbolizer.final_user_frames(owner, list(raw.user_stack), chosen)
        if walked_in is not None and final:
            user = tuple(user)
            self._keep_by_file(raw, user)
        return self._merged(raw, info, user, False, None)

    @staticmethod
    def _walked_in(raw: RawStack, owner_info):
        """The process as its mappings were when the kernel walked raw (now, or before one of the
        last rereads: the latest whose file hash is the stack's), or None if that cannot be told."""
        if not raw.user_hash:
            return None
        if _file_hash_matches(raw, owner_info.mappings):
            return owner_info
        for earlier in owner_info.earlier:
            if _file_hash_matches(raw, earlier):
                return dataclasses.replace(owner_info, mappings=earlier, earlier=(), alive=False)
        return None

    def _merged(self, raw: RawStack, info, user: list[Frame], final: bool, key: tuple | None
                ) -> tuple[list[Frame], bool]:
        """The native frames with the runtime frames merged in (kept for reuse under `key` when
        every frame is named as it will stay)."""
        if not raw.runtime_stack:
            return user, False
        native = user
        for source in self.runtimes:
            # a source whose merge depends only on (pid, key, native frames) says, with final_merge,
            # whether the merged stack is named as it will stay: only such a stack is reused
            merged, named_all = source.final_merge(raw.pid, raw.runtime_stack, native)
            if merged is not native:
                # (identity, in one C-level pass: `in` would compare frames field by field)
                truncated = any(map(is_, merged, repeat(TRUNCATED)))
                if final and named_all and key is not None:
                    merged = tuple(merged)
                    self._keep(key, info, merged, truncated, native)
                return merged, truncated
        return native, False

    def _reuse(self, key: tuple, info) -> tuple[list[Frame], bool] | None:
        """(frames, truncated) named for `key` within KEEP_INTERVALS intervals, if its process and
        mappings are still those they were named with."""
        named = self._named.get(key)
        if named is None or info is None or named[0] is not info or named[1] is not info.mappings:
            return None
        self.symbolizer.stats.hits += named[4]
        self.symbolizer.stats.misses += named[5]
        return named[2], named[3]

    def _keep(self, key: tuple, info, frames: tuple[Frame, ...], truncated: bool, native: Sequence[Frame]) -> None:
        """Remember a stack for `_reuse` whose every frame is named as it will stay (the symbolizer
        and the source told: no `[unknown]`, no JIT frame, whose map the runtime may rewrite for
        other code, no unreadable runtime frame). Kept stacks are tuples: a sample of a user stack
        alone takes the kept tuple itself as its stack, one object for every sample of it."""
        if info is None:
            return
        named_native = sum(map(_RESOLVED, native))
        self._named.put(key, (info, info.mappings, frames, truncated, named_native, len(native) - named_native))
