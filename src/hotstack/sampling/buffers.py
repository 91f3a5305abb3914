"""The one reader of the double-buffered stack counts every sampler program writes (bpf/counts.h).

Counts per struct stack_key live in `counts_<b>`, the stacks their ids name in
`{user,kern}_stacks_<b>`, b = 0 or 1. Reading flips the programs to the other buffer, waits for
programs still running on the old one, then drains it and clears its stacks, so every count is
read exactly once. The per-CPU `stats` counters are read as deltas since the previous read.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import ebpf
from ..bpf import schema
from ..bpf.record import c_string
from ..profile.model import ProfileStats

# BPF programs run with preemption off and take microseconds: after a flip, this is ample
# time for any program that read the old buffer index to finish.
FLIP_GRACE_S = 0.005
_U32 = struct.Struct("<I")
# A batched read's buffers are a batch of values: under glibc's mmap threshold (128 KiB) they come
# from the heap. 256 records of 4 KiB would be two fresh 1 MiB mappings per read, ~2 ms of CPU for
# an empty map.
BATCH_BYTES = 120 << 10
NO_STACK = -1     # a stack id that was not asked for (not a loss)


class RawStack(NamedTuple):
    """One counted stack as the kernel recorded it: addresses, not yet symbolized. (A NamedTuple:
    a drain makes one per counted key, and a frozen dataclass's __init__ sets each field through
    object.__setattr__, ~4x the time of tuple.__new__.)"""

    pid: int
    tid: int
    comm: str
    user_stack: tuple[int, ...]       # leaf first; empty if not collected or lost
    kernel_stack: tuple[int, ...]     # leaf first
    value: int                        # samples, hits or nanoseconds
    user_stack_lost: bool = False
    kernel_stack_lost: bool = False
    runtime_stack: int = 0            # key of its runtime frames (a frame source's), 0: none
    trace_id: bytes = bytes(16)       # the thread's OBI span, zero: none
    span_id: bytes = bytes(8)
    # the process whose addresses user_stack holds, 0: this one. A kernel-unwound stack whose frames
    # are all in files is stored once for every process of those files (bpf/native_unwind.h, struct
    # nu_stack), with the addresses of the first process that stored it
    user_pid: int = 0
    # a kernel-unwound user stack's hash where it is by (file, file offset) per frame (struct
    # nu_stack: every frame in a file), and how its walk ended; 0: not such a stack. Its names
    # depend on nothing else: naming reuses them across processes, and checks with it that the
    # mappings it names the addresses with are those the kernel walked them in
    user_hash: int = 0
    user_end: int = 0
    # such a stack's callers' hash (every frame but the leaf, struct nu_stack.callers) and its
    # leaf's file (inode, the kernel's device number) and file offset: named from another stack's
    # callers and the leaf's file offset, with no mappings; 0: not such a stack
    user_callers: int = 0
    leaf_ino: int = 0
    leaf_dev: int = 0
    leaf_offset: int = 0


@dataclass
class RawBatch:
    """What one collect drained: stacks, the interval, and the kernel's counters."""

    stacks: list[RawStack]
    start_ns: int
    end_ns: int
    stats: ProfileStats = field(default_factory=ProfileStats)


def without_kernel_stacks(stacks: list[RawStack]) -> list[RawStack]:
    """The stacks with their kernel part dropped (EngineConfig.kernel_stacks off, pyroscope.ebpf's
    kernel_frames = false). The CPU sampler asks the kernel for none; the off-CPU and kernel-probe
    programs take one where they stop (a switch-out, a kernel function) and drop it here, so every
    profile type sent goes without them."""
    return [s._replace(kernel_stack=(), kernel_stack_lost=False) if s.kernel_stack or s.kernel_stack_lost else s
            for s in stacks]


def parse_stack(raw: bytes) -> tuple[int, ...]:
    """A stack-map value: up to MAX_STACK_DEPTH u64 addresses, zero-terminated."""
    addrs = struct.unpack_from(f"<{len(raw) // 8}Q", raw)
    try:
        return addrs[:addrs.index(0)]
    except ValueError:
        return addrs


def with_caller(stack: tuple[int, ...], caller: int) -> tuple[int, ...]:
    """Put the caller (return address read at a function's entry) after the leaf, unless it is there."""
    if not caller or not stack or (len(stack) > 1 and stack[1] == caller):
        return stack
    return (stack[0], caller) + stack[1:]


def is_lost(stack_id: int, stack: tuple | None) -> bool:
    """A stack asked for and not stored: the map refused it, or its id no longer resolves.
    -EFAULT is no loss: the task has no user stack (a kernel thread)."""
    return stack is None or (stack_id < NO_STACK and stack_id != -schema.EFAULT)


def parse_native_stack(raw: bytes) -> tuple[int, ...]:
    """A native_stacks_<b> value (struct nu_stack): its header, then addresses."""
    n = NATIVE_STACK_HEADER.unpack_from(raw)[_H_N]
    return struct.unpack_from(f"<{min(n, (len(raw) - _PCS) // 8)}Q", raw, _PCS)


# struct nu_stack's header (hash, n, end, pid, by_file, callers, leaf_offset, leaf_ino, leaf_dev),
# unpacked into a plain tuple and read by position; its addresses from _PCS on
NATIVE_STACK_HEADER = schema.NU_STACK.struct
_PCS = schema.NU_STACK_TAIL_OFFSET
_H_HASH, _H_N, _H_END, _H_PID, _H_BY_FILE, _H_CALLERS, _H_LEAF_OFFSET, _H_LEAF_INO, _H_LEAF_DEV = (
    schema.NU_STACK.fields.index(name) for name in ("hash", "n", "end", "pid", "by_file", "callers", "leaf_offset",
                                                    "leaf_ino", "leaf_dev"))
NU_END_TRUNCATED = schema.NU_END_TRUNCATED
NU_END_NO_MAPPING = schema.NU_END_NO_MAPPING
NU_END_INVALID = schema.NU_END_INVALID
_NO_HEADER = (0,) * len(schema.NU_STACK.fields)


# The stacks of a stack-trace map that the last interval counted stay in it for the buffer's next
# interval (KeptStacks). Every this many clears of a buffer, the map's keys are listed and every
# stack no count named is deleted (one the kernel stored for a count it could not store: a full
# counts map, an off-CPU switch never counted).
FULL_CLEAR_EVERY = 12


class KeptStacks:
    """The stacks a buffer's stack-trace map still holds from its last interval: id -> stack.

    The kernel's stack-trace maps have no batch operations: reading and clearing each stack an
    interval counts would cost a lookup and a delete, and a next-key per stack, each ~5-18 us of
    CPU. A stack
    stored without BPF_F_REUSE_STACKID (every program here) keeps its id, and the id its stack,
    until it is deleted: the kernel answers the same id for the same stack, and another stack of
    that bucket is refused (a counted collision), never put in its place. So the stacks an interval
    counted are kept in the map, and known here, for the buffer's next interval, which counts most
    of them again (a process's system calls, its page faults); only those it did not count go."""

    def __init__(self) -> None:
        self.stacks: dict[int, tuple[int, ...]] = {}
        self.held: set[int] = set()     # ids left in the map for events in flight, not read
        self.clears = 0


class StackReader:
    """Looks stack ids of one buffer up, once each.

    The kernel unwinder's stacks (a hash map) are read in batches, ~100 a call, and deleted in one
    call, where one lookup, one next-key and one delete a stack would be ~3 syscalls per distinct
    stack and interval. The kernel's stack-trace maps have no batch
    operations: their stacks are read one by one, those of the buffer's last interval known
    (`kept`: role -> KeptStacks, role "user" or "kernel")."""

    def __init__(self, collection: ebpf.Collection, buffer: int, user_stacks: str = "user_stacks",
                 parse_user=parse_stack, kept: dict[str, KeptStacks] | None = None) -> None:
        self.user = collection.maps[schema.buffered(user_stacks, buffer)]
        self.kernel = collection.maps[schema.buffered("kern_stacks", buffer)]
        self._parse_user = parse_user
        # id -> (stack or None: not stored, its struct nu_stack header); id -> stack or None
        self._users: dict[int, tuple[tuple[int, ...] | None, tuple]] = {}
        self._kernels: dict[int, tuple[int, ...] | None] = {}
        self._batched = self.user.spec.type == ebpf.MAP_TYPE_HASH
        # a kernel-unwound stack's addresses past its first NATIVE_STORED_FRAMES (few stacks)
        self.tails = collection.maps.get(schema.buffered("native_tails", buffer)) if self._batched else None
        self._tail_raw: dict[int, bytes] | None = None
        self._user_raw: dict[int, bytes] | None = None
        kept = kept if kept is not None else {"user": KeptStacks(), "kernel": KeptStacks()}
        self._kept_user, self._kept_kernel = kept["user"], kept["kernel"]

    def user_stack(self, stack_id: int) -> tuple[tuple[int, ...] | None, tuple[int, int, int, int, int]]:
        """(the user stack of an id (None: asked for and not stored; empty: not asked for), its
        header: (hash, frames, end, pid, by file, callers, leaf offset, leaf inode, leaf device) of a
        kernel-unwound stack (struct nu_stack; pid: the process whose addresses it holds), zeros for
        the kernel's stack maps (--unwind fp),
        whose stacks are each sample's own). Each id is parsed once, its header with it."""
        found = self._users.get(stack_id)
        if found is None:
            if stack_id < 0:
                return (), _NO_HEADER
            if self._batched:
                raw = self._user_stacks().get(stack_id)
                header = NATIVE_STACK_HEADER.unpack_from(raw) if raw is not None else _NO_HEADER
                stack = self._parse_user(raw) if raw is not None else None
                if stack is not None and header[_H_N] > len(stack):
                    stack, header = self._with_tail(stack_id, stack, header)
            else:
                stack, header = _kept_or_read(self._kept_user, self.user, stack_id, self._parse_user), _NO_HEADER
            found = self._users[stack_id] = (stack, header)
        return found

    def _with_tail(self, stack_id: int, stack: tuple[int, ...], header: tuple) -> tuple[tuple[int, ...], tuple]:
        """A deep stack with its addresses from native_tails; where the kernel found no room for
        them, its first addresses, ended as cut (NU_END_TRUNCATED: a [truncated] frame) and not
        keyed by file (its hash is of every frame)."""
        if self._tail_raw is None:
            self._tail_raw = {_U32.unpack(k)[0]: v for k, v in self.tails.items(1)} if self.tails is not None and \
                self.tails.any_key() else {}
        tail = self._tail_raw.get(stack_id)
        if tail is None:
            cut = schema.NU_STACK.tuple._make(_NO_HEADER)._replace(n=len(stack), end=NU_END_TRUNCATED,
                                                                  pid=header[_H_PID])
            return stack, tuple(cut)
        rest = min(header[_H_N] - len(stack), len(tail) // 8)
        return stack + struct.unpack_from(f"<{rest}Q", tail), header

    def kernel_stack(self, stack_id: int) -> tuple[int, ...] | None:
        if stack_id < 0:
            return ()
        try:
            return self._kernels[stack_id]
        except KeyError:
            found = self._kernels[stack_id] = _kept_or_read(self._kept_kernel, self.kernel, stack_id, parse_stack)
            return found

    def _user_stacks(self) -> dict[int, bytes]:
        if self._user_raw is None:
            self._user_raw = {_U32.unpack(k)[0]: v for k, v in self.user.items(self._batch_size())}
        return self._user_raw

    def _batch_size(self) -> int:
        return max(1, BATCH_BYTES // self.user.buffer_value_size)

    def clear(self, keep: Iterable[tuple[int, int]] = ()) -> None:
        """Delete every stack of the buffer except the (user, kernel) ids in `keep` (still referenced)."""
        keep = list(keep)
        if self.tails is not None and (self._tail_raw or self.tails.any_key()):
            kept_users = {u for u, _ in keep}
            gone = [k for k in list(self.tails.keys()) if _U32.unpack(k)[0] not in kept_users]
            if gone:
                self.tails.delete_batch(gone)
        for m, kept in ((self.user, {u for u, _ in keep if u >= 0}), (self.kernel, {k for _, k in keep if k >= 0})):
            # Every stack not still referenced goes, including those whose count could not be stored.
            if m is self.user and self._batched:
                if self._user_raw is not None:
                    # every stack of the buffer was read (no program writes to a buffer drained):
                    # deleted by key, their values not copied out again
                    gone = [_U32.pack(i) for i in self._user_raw if i not in kept]
                    if gone:
                        m.delete_batch(gone)
                elif not kept:
                    m.drain(self._batch_size())
                else:
                    m.delete_batch([k for k, _ in m.items(self._batch_size()) if _U32.unpack(k)[0] not in kept])
                continue
            self._clear_kept(m, kept, self._kept_user if m is self.user else self._kept_kernel,
                             {i: s for i, (s, _h) in self._users.items()} if m is self.user else self._kernels)

    @staticmethod
    def _clear_kept(m: ebpf.Map, kept: set[int], known: KeptStacks, counted: dict) -> None:
        """Clear a stack-trace map but for the stacks this interval counted (kept, and known, for
        the buffer's next interval) and those in `kept`; the map's keys listed every
        FULL_CLEAR_EVERY clears (see KeptStacks)."""
        now = {i: stack for i, stack in counted.items() if i >= 0 and stack is not None}
        known.clears += 1
        if known.clears % FULL_CLEAR_EVERY == 0:
            in_map = [_U32.unpack(raw_id)[0] for raw_id in list(m.keys())]
        else:
            in_map = known.stacks.keys() | known.held
        for stack_id in in_map:
            if stack_id not in now and stack_id not in kept:
                m.delete(_U32.pack(stack_id))
        known.stacks, known.held = now, kept - now.keys()


def _kept_or_read(kept: KeptStacks, m: ebpf.Map, stack_id: int, parse) -> tuple[int, ...] | None:
    """The stack under `stack_id`: known from the buffer's last interval, or read from the map."""
    found = kept.stacks.get(stack_id)
    if found is None:
        raw = m.lookup(_U32.pack(stack_id))
        found = parse(raw) if raw is not None else None
    return found


# stack_key and stack_count fields by position (the records' own order, looked up by name once):
# the drain unpacks each record into a plain tuple, where a named tuple a record would cost a
# Python-level call
_KEY_FIELD = {name: i for i, name in enumerate(schema.STACK_KEY.fields)}
_K_PID, _K_TID, _K_USER, _K_KERN, _K_RUNTIME, _K_CALLER, _K_TRACE, _K_SPAN = (
    _KEY_FIELD[name] for name in ("pid", "tid", "user_stack_id", "kern_stack_id", "runtime_stack", "caller",
                                  "trace_id", "span_id"))
_C_VALUE, _C_COMM = (schema.STACK_COUNT.fields.index(name) for name in ("value", "comm"))
_new_raw_stack = tuple.__new__


def raw_stacks(drained: list[tuple[bytes, bytes]], stacks: StackReader) -> list[RawStack]:
    """RawStacks from a buffer's drained (stack_key, stack_count) records, their stacks from
    `stacks`. Records unpacked into plain tuples and RawStacks made by tuple.__new__ at C level: a
    drain is ~400 records a 5 s interval per sampler at 99 Hz on two CPUs, and two named tuples and
    RawStack's Python-level constructor a record would be most of its time."""
    unpack_key, unpack_count = schema.STACK_KEY.struct.unpack_from, schema.STACK_COUNT.struct.unpack_from
    user_stack, kernel_stack = stacks.user_stack, stacks.kernel_stack
    out = []
    append = out.append
    comms: dict[bytes, str] = {}     # (a buffer's keys share a few comms: each decoded once)
    for key, value in drained:
        k, count = unpack_key(key), unpack_count(value)
        comm = comms.get(count[_C_COMM])
        if comm is None:
            comm = comms[count[_C_COMM]] = c_string(count[_C_COMM])
        pid, user_id, kern_id = k[_K_PID], k[_K_USER], k[_K_KERN]
        ustack, header = user_stack(user_id)
        caller = k[_K_CALLER]
        user = with_caller(ustack, caller) if caller and ustack else (ustack or ())
        if not ustack:
            header = _NO_HEADER
        kstack = kernel_stack(kern_id)
        owner = header[_H_PID]
        # (a caller put in is not in the kernel's hash: such a stack is not checked)
        by_file = header[_H_BY_FILE] and user is ustack
        append(_new_raw_stack(RawStack, (
            pid, k[_K_TID], comm, user, kstack or (), count[_C_VALUE], is_lost(user_id, ustack),
            is_lost(kern_id, kstack), k[_K_RUNTIME], k[_K_TRACE], k[_K_SPAN], owner if owner != pid else 0,
            header[_H_HASH] if by_file else 0, header[_H_END], header[_H_CALLERS] if by_file else 0,
            header[_H_LEAF_INO], header[_H_LEAF_DEV], header[_H_LEAF_OFFSET])))
    return out


class StackBuffers:
    """The two buffers of one loaded sampler collection."""

    def __init__(self, collection: ebpf.Collection) -> None:
        self._collection = collection
        self.active = 0
        self._last_ns = time.time_ns()
        self.lock = threading.Lock()
        self._stat_totals = [0] * schema.STAT_MAX
        # where user stack ids point: the kernel's stack maps, or the kernel unwinder's (cpu.py)
        self.user_stacks = "user_stacks"
        self.parse_user = parse_stack
        # per buffer: the stacks its stack-trace maps hold from its last interval
        self._kept = [{"user": KeptStacks(), "kernel": KeptStacks()} for _ in range(2)]

    def flip(self) -> int:
        """Send the programs to the other buffer; returns the one to drain (call under `lock`)."""
        drained = self.active
        self.active ^= 1
        self._collection.variable("active_buffer").set(self.active)
        time.sleep(FLIP_GRACE_S)
        return drained

    def read(self, buffer: int) -> tuple[list[RawStack], StackReader]:
        """Drain a buffer's counts; the reader resolves (and later clears) its stacks."""
        stacks = StackReader(self._collection, buffer, self.user_stacks, self.parse_user, self._kept[buffer])
        return raw_stacks(self._collection.maps[schema.buffered("counts", buffer)].drain(), stacks), stacks

    def interval(self) -> tuple[int, int]:
        """(start, end) of the interval drained now, in ns since the epoch."""
        now = time.time_ns()
        start, self._last_ns = self._last_ns, now
        return start, now

    def read_stats(self) -> ProfileStats:
        totals = self._collection.maps["stats"].percpu_u64_sums()[:schema.STAT_MAX]
        d = [t - p for t, p in zip(totals, self._stat_totals)]
        self._stat_totals = totals
        return ProfileStats(
            samples=d[schema.STAT_SAMPLES], idle=d[schema.STAT_IDLE], filtered=d[schema.STAT_FILTERED],
            counts_full=d[schema.STAT_COUNTS_FULL],
            user_stacks_lost=d[schema.STAT_USTACK_COLLISION] + d[schema.STAT_USTACK_ERROR],
            kernel_stacks_lost=d[schema.STAT_KSTACK_COLLISION] + d[schema.STAT_KSTACK_ERROR],
            stack_collisions=d[schema.STAT_USTACK_COLLISION] + d[schema.STAT_KSTACK_COLLISION])
