"""The one profile data model that every output reads.

Pure data: no BPF, no network. A Profile holds Samples; a Sample holds a stack of
Frames (leaf first) and a value, plus the identity of the thread it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple


class FrameKind(str, Enum):
    KERNEL = "kernel"
    NATIVE = "native"
    PYTHON = "python"
    RUBY = "ruby"            # runtimes/ruby
    PHP = "php"              # runtimes/php
    PERL = "perl"            # runtimes/perl
    JIT = "jit"
    JS = "js"          # JavaScript, named from V8's heap (runtimes/v8/)
    JAVA = "java"


UNKNOWN = "[unknown]"


@dataclass(frozen=True, slots=True)
class Frame:
    """One symbolized frame.

    `name` is what people read: the function, or `module+0xOFF` when the file has no
    symbol for the address, or `[unknown]` when not even the file is known.
    """

    name: str
    kind: FrameKind = FrameKind.NATIVE
    module: str = ""        # path of the mapped file; "[kernel.kallsyms]" or "[module]" for the kernel
    address: int = 0        # address inside the module (ELF virtual address), or the kernel address
    build_id: str = ""
    file: str = ""          # source file, where known
    line: int = 0           # source line, where known
    resolved: bool = True   # False for module+0xOFF and [unknown]

    @property
    def is_kernel(self) -> bool:
        return self.kind is FrameKind.KERNEL


# Markers in place of frames that could not be had: the walk was cut (too deep), or the kernel
# could not store the stack. A lost kernel stack's marker is a kernel frame: it stands where the
# kernel frames would, so that every split of a stack into kernel and user parts (ig's kern_stack
# and user_stack_raw, pprof's kernel mapping, OTLP's frame types) puts it on the kernel side.
TRUNCATED = Frame("[truncated]", resolved=False)
LOST_USER = Frame("[lost user stack]", resolved=False)
LOST_KERNEL = Frame("[lost kernel stack]", FrameKind.KERNEL, resolved=False)


@dataclass(frozen=True, slots=True)
class ValueType:
    type: str
    unit: str


class Sample(NamedTuple):
    """A distinct stack of one thread with its count. `stack` is leaf first: kernel frames, then user.

    A named tuple, not a frozen dataclass: one is made for every counted stack of every interval,
    and a frozen dataclass's __init__ (an object.__setattr__ a field) costs 2.2-2.7 us a sample
    against 0.7-1.0 (timeit): ~4 ms of the engine's ~100 a 20 s under bench/otel_profiler.py's load.
    Copies with other fields: `sample._replace(...)`."""

    stack: tuple[Frame, ...]
    value: int
    pid: int
    tid: int
    comm: str
    labels: tuple[tuple[str, str], ...] = ()   # extra attributes: container id, target labels ...

    def label(self, key: str, default: str = "") -> str:
        for k, v in self.labels:
            if k == key:
                return v
        return default


@dataclass
class ProfileStats:
    """What happened while sampling: shown in the result's footer, never dropped silently."""

    samples: int = 0              # samples the BPF program saw (before filters)
    idle: int = 0                 # dropped: idle CPU (without --include-idle)
    filtered: int = 0             # dropped: pid/comm filters
    out_of_scope: int = 0         # dropped in userspace, before symbols: a process the front door's
                                  # target filter declines (`hotstack run` without --host: a host process);
                                  # in the profile's values (samples, probe hits, off-CPU nanoseconds)
    counts_full: int = 0          # dropped: aggregation map full
    user_stacks_lost: int = 0     # kept, but without their user stack
    kernel_stacks_lost: int = 0   # kept, but without their kernel stack
    stack_collisions: int = 0     # of those lost, by stack-map bucket collisions
    truncated: int = 0            # kept, with a stack (native or runtime) cut short (a [truncated] frame)
    runtimes_unread: int = 0      # processes of a runtime hotstack recognized and cannot read (its
                                  # version or build): their runtime frames are missing (warned once)
    runtimes_partly_read: int = 0  # processes of a runtime read in part: frames named, some of their
                                   # lines missing (JDK 8's compiled loops; warned once)
    engine_failures: int = 0      # inside the engine: a background thread that raised (logged,
                                  # restarted), a frame source that raised on a process (logged)
    files_not_held: int = 0       # files of processes in their own root (or deleted ones) not held
                                  # open past a bound (procs/held_files.py): named only while they run
    # --unwind kernel (bpf/native_unwind.h): walks that stopped short of the process root (no
    # mapping, a fault, a rule it cannot follow, 128 frames), PCs met in a file whose table was not
    # loaded yet (queued; the next samples have it), frames found with frame pointers for want of a table
    native_incomplete: int = 0
    native_no_table: int = 0
    native_fp_frames: int = 0

    def add(self, other: "ProfileStats") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


CPU_SAMPLE_TYPE = ValueType("samples", "count")


def amount_text(value: int, sample_type: "ValueType") -> str:
    """A sum of a profile's values in its own terms: samples, probe hits, or time off the CPU
    (an off-CPU profile's values are nanoseconds, summed over threads, not samples)."""
    if sample_type.unit == "nanoseconds":
        return f"{value / 1e9:.1f} s off the CPU"
    return f"{value} samples" if sample_type.type == "samples" else f"{value} {sample_type.type} hits"
CPU_PERIOD_TYPE = ValueType("cpu", "nanoseconds")


@dataclass
class Profile:
    """Samples of one interval [start_ns, start_ns + duration_ns)."""

    samples: list[Sample]
    start_ns: int
    duration_ns: int
    frequency_hz: int
    name: str = "process_cpu"
    sample_type: ValueType = CPU_SAMPLE_TYPE
    period_type: ValueType = CPU_PERIOD_TYPE
    stats: ProfileStats = field(default_factory=ProfileStats)

    @property
    def period(self) -> int:
        """Nanoseconds of CPU one sample stands for: 1e9 / Hz."""
        return 1_000_000_000 // self.frequency_hz if self.frequency_hz else 1

    @property
    def total(self) -> int:
        return sum(s.value for s in self.samples)

    def __bool__(self) -> bool:
        return bool(self.samples)
