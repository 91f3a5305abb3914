"""A frame source's kernel half, by role (runtimes/registry.RuntimeKernel), over a loaded collection.

The roles come from bpf/schema.yaml (a group with `runtime:`): the tunable the walker needs, the
map of processes to walk, the double-buffered map of recorded stacks and the counters. For an
interpreter walked by a program of its own (`walker`, tail-called through rt_progs[`slot`]),
that program, and for a runtime walked by the kernel unwinder's hooks (`step`: V8, HotSpot), the
step program built with them, which replaces the plain one in nu_progs[0]. Either is loaded when
the first process is listed, or seen starting (ready()): verifying a walker costs 0.1-0.7 s of CPU,
the hooked step program ~0.07 s, paid only on hosts that run the runtime.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading

from .. import ebpf
from ..ebpf import features
from ..bpf import schema
from .ringbuf import RingBuffer
from .step_programs import DEEP_SUFFIX, StepPrograms
from .buffers import BATCH_BYTES   # (Ruby, PHP, Perl records of 4 KiB: 29 a call, ~30 us empty, ~2.5 us each)

_PID = struct.Struct("<I")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_WALKS = _U32.pack(0)       # every runtime group's first counter counts the walker's walks (bpf/schema.yaml)
_URGENT_NICE = -10          # ~9x the CPU share of a thread at nice 0


@contextlib.contextmanager
def urgent():
    """This thread at a raised priority for a while (where it may: CAP_SYS_NICE). The kernel verifies
    a runtime's program in the loading thread, for 0.1-0.35 s of CPU, while the runtime's first
    process waits for its names; on a host whose CPUs that process keeps busy, at the default
    priority that takes 1.4 s (8 busy JVM threads on 2 CPUs). The pid watcher runs so throughout
    (sampling/process_watch.py)."""
    tid = threading.get_native_id()
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, _URGENT_NICE)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, tid, before)


# A walker's variant that steps its frames with bpf_loop (bpf/python.h): the verifier checks one
# step, not each of an unrolled loop's, so loading it costs a fraction of the CPU. Loaded instead of
# the walker where the kernel has bpf_loop (5.17+).
LOOP_SUFFIX = "_loop"


def runtime_programs(*roles: str) -> set[str]:
    """The programs that schema.yaml gives the runtimes in these roles (walker, step), with their
    bpf_loop variants."""
    names = {r[k] for r in schema.RUNTIMES.values() for k in roles if k in r}
    return names | {name + LOOP_SUFFIX for name in names}


def _variant(collection: ebpf.Collection, name: str) -> str:
    """The program to load for `name`: its bpf_loop variant where the object has one and the kernel
    has bpf_loop, else itself."""
    looped = name + LOOP_SUFFIX
    if looped in collection.spec.programs and features.helper_available("bpf_loop"):
        return looped
    return name


def deferred_programs(programs) -> set[str]:
    """Of these program names, those loaded when first wanted: the runtime programs (with the
    runtime's first process) and the deep step programs (with the first walk cut short:
    step_programs.py)."""
    return (runtime_programs("walker", "step") | {n for n in programs if n.endswith(DEEP_SUFFIX)}) & set(programs)


def _program_slot(collection: ebpf.Collection, roles: dict) -> tuple[str, str, int] | None:
    """(program, prog-array map, slot) that the runtime's first process puts in place, if any: its
    walker in rt_progs, or the hooked step program in nu_progs[0] where the kernel unwinder runs
    (without it, --unwind fp, the object's step programs are not in the spec)."""
    if "walker" in roles:
        return roles["walker"], "rt_progs", roles["slot"]
    if roles.get("step") in collection.spec.programs:
        return roles["step"], "nu_progs", 0
    return None


class RuntimeMaps:
    def __init__(self, collection: ebpf.Collection, group: str, steps: StepPrograms | None = None) -> None:
        self._collection = collection
        self._steps = steps          # the step program's place (a runtime with hooks in the unwinder)
        self._roles = schema.RUNTIMES[group]
        self._processes = collection.maps[self._roles["processes"]]
        self._counters = collection.maps[self._roles["counters"]]
        self._totals = [0] * self._roles["counter_count"]
        self._slot = _program_slot(collection, self._roles)
        self._walker_ready: bool | None = None if self._slot else True
        self._walker_lock = threading.Lock()
        self._tracked = False       # a process was listed once
        self._tunable_value: int | None = None     # set when the step program is in place (configure)
        self._batch = max(1, BATCH_BYTES // self._stacks(0).buffer_value_size)
        self._snapshots: RingBuffer | None = None   # the walker's copies of what names frames, if it makes them
        self._snapshots_lock = threading.Lock()

    def configure(self, value: int) -> None:
        """Set the runtime's tunable. A runtime hooked into the kernel unwinder's steps (V8,
        HotSpot) has it set only once its step program is in place, at its first process. The
        tunable turns on its look-up of the sampled process in profile_cpu (v8_begin, hs_begin:
        five map lookups between them, two in hash maps, on every sample of every process), on
        hosts that never run it too."""
        with self._walker_lock:
            if self._slot is not None and self._slot[1] == "nu_progs" and not self._walker_ready:
                self._tunable_value = value
                return
        self._collection.variable(self._roles["tunable"]).set(value)

    def _walker(self) -> bool:
        """The runtime's own program loaded and in its slot (once); False if it cannot load here."""
        if self._walker_ready is not None:
            return self._walker_ready
        with self._walker_lock:
            if self._walker_ready is None:
                name, table, slot = self._slot
                try:
                    with urgent():
                        if table == "nu_progs" and self._steps is not None:
                            self._steps.with_runtime_hooks(name)
                        else:
                            program = self._load(name)
                            self._collection.maps[table].update(_U32.pack(slot), _U32.pack(program.fd))
                    if table == "rt_progs":      # the sampler looks its processes up from now on
                        self._collection.maps["rt_listed"].update(_U32.pack(slot), _U32.pack(1))
                    elif self._tunable_value is not None:     # (configure: from now on)
                        self._collection.variable(self._roles["tunable"]).set(self._tunable_value)
                    self._walker_ready = True
                except (ebpf.EbpfError, OSError, ValueError, KeyError) as e:
                    logging.getLogger(__name__).warning("%s frames off: %s", name, e)
                    self._walker_ready = False
        return self._walker_ready

    def _load(self, name: str) -> ebpf.Program:
        """The walker, as its bpf_loop variant where it can be (a refused variant falls back)."""
        chosen = _variant(self._collection, name)
        if chosen != name:
            try:
                return self._collection.load_deferred(chosen)
            except (ebpf.EbpfError, OSError) as e:
                logging.getLogger(__name__).info("%s refused, %s instead: %s", chosen, name, e)
        return self._collection.load_deferred(name)

    def ready(self) -> bool:
        return self._walker()

    def track(self, pid: int, record: bytes) -> bool:
        if not self._walker():
            return False
        try:
            self._processes.update(_PID.pack(pid), record)
        except (ebpf.EbpfError, OSError, ValueError):      # map full, or the session is closing: native frames only
            return False
        self._tracked = True
        return True

    def untrack(self, pid: int) -> None:
        try:
            self._processes.delete(_PID.pack(pid))
        except (ebpf.EbpfError, OSError, ValueError):
            pass

    def _stacks(self, buffer: int) -> ebpf.Map:
        return self._collection.maps[schema.buffered(self._roles["stacks"], buffer)]

    def recorded(self, buffer: int, skip=()):
        """(key, record) pairs so far, but for keys in `skip` (already read). One batched read of
        the map (a syscall per ~30 records): walking the keys took two syscalls per record (next
        key, lookup), ~0.1% of a core for 30 interpreter processes."""
        for key, raw in self._stacks(buffer).items(self._batch):
            if key not in skip:
                yield key, raw

    def take(self, buffer: int) -> list[tuple[bytes, bytes]]:
        # the walker records listed processes only: a runtime this host never ran has nothing
        # (each empty drain would cost ~0.1 ms of a collect, for each runtime)
        return self._stacks(buffer).drain(self._batch) if self._tracked else []

    @property
    def remembers(self) -> bool:
        """Whether the walker skips the stacks userspace says it holds (`know`); its `stored`
        counter then tells whether it stored anything new."""
        return "known" in self._roles

    def hold_keys(self, keys: list[bytes]) -> None:
        """Keys of stacks userspace holds (parsed): the walker stores them no more (one syscall)."""
        if keys:
            self._collection.maps[self._roles["known"]].update_batch(b"".join(keys), b"\1" * len(keys), len(keys))

    def release_keys(self, keys: list[bytes]) -> None:
        """Keys userspace no longer holds: the walker stores them again when it meets them."""
        if keys:
            self._collection.maps[self._roles["known"]].delete_batch(keys)

    def stored(self) -> int:
        """The stacks the walker stored so far, over every CPU (one syscall)."""
        return sum(_U64.unpack_from(v)[0] for v in self._counters.lookup_percpu(_U32.pack(self._roles["stored"])))

    def walks(self) -> int:
        """The walker's walks so far, over every CPU (one syscall): a stack is recorded only by a
        walk, so while this stays the same nothing new was recorded."""
        return sum(_U64.unpack_from(v)[0] for v in self._counters.lookup_percpu(_WALKS))

    def snapshots(self) -> list[bytes]:
        """The records the walker copied into its `snapshots` ring since the last call (Python's
        py_codes: code objects with their names); [] for a walker that makes none."""
        name = self._roles.get("snapshots")
        if name is None or not self._tracked:
            return []
        with self._snapshots_lock:
            if self._snapshots is None:
                ring = self._collection.maps[name]
                self._snapshots = RingBuffer(ring.fd, ring.spec.max_entries)
            return self._snapshots.read()

    def close(self) -> None:
        with self._snapshots_lock:
            if self._snapshots is not None:
                self._snapshots.close()
                self._snapshots = None

    def counters(self) -> list[int]:
        totals = self._counters.percpu_u64_sums()[:len(self._totals)]
        delta = [t - p for t, p in zip(totals, self._totals)]
        self._totals = totals
        return delta
