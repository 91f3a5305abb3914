"""The engine's one configuration, validated in one place.

Front doors (`hotstack run`'s flags, pyroscope.ebpf's arguments) translate theirs into an
EngineConfig; `validate(names)` names each field as the front door spells it, so the same rule
gives `--sample-rate 5000: ...` on one side and `sample_rate 5000: ...` on the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError
from .obi import ObiConfig
from .probe_links import ProbeLink

MIN_FREQUENCY, MAX_FREQUENCY = 1, 1000
UNWIND_MODES = ("kernel", "fp")
DEMANGLE_MODES = ("none", "simplified", "templates", "full")
COMM_MAX = 15     # a task's comm: TASK_COMM_LEN 16 with the NUL


@dataclass(frozen=True)
class EngineConfig:
    # Which samplers run: the CPU sampler (a cpu-clock perf event per CPU at `frequency`), the
    # off-CPU sampler (sched_switch, when off_cpu_threshold > 0), probes (when links are given).
    cpu: bool = True
    frequency: int = 49
    off_cpu_threshold: float = 0.0    # chance (0..1] that a switch off the CPU is recorded; 0: off
    probe_links: tuple[ProbeLink, ...] = ()
    # What is sampled, decided in the kernel: these pids only, these command names only (CPU).
    pids: tuple[int, ...] = ()
    comms: tuple[str, ...] = ()
    # The pids sampled are set while running (Engine.set_kernel_pids: the agent's targets), in the
    # kernel: the programs skip everyone else before any unwinding. Off: `pids`, or every pid.
    pids_at_run_time: bool = False
    include_idle: bool = False
    # hotstack's own process: its samples are counted (with their kernel stacks) either way; its user
    # stacks are walked and named only with own_stacks, or when `pids` names it (bpf/pids.h).
    own_stacks: bool = False
    user_stacks: bool = True
    kernel_stacks: bool = True
    # "kernel" (the default): every user stack unwound in the kernel with .eh_frame tables in BPF
    # maps (bpf/native_unwind.h); "fp": frame pointers only (cheaper, wrong where code lacks them).
    unwind: str = "kernel"
    runtime_frames: bool = True       # frame sources (CPython ...) replace interpreter frames
    runtimes_off: tuple[str, ...] = ()  # frame sources turned off by name (runtimes/registry.FRAME_SOURCES)
    obi: ObiConfig | None = None      # trace/span labels from OBI's pinned map; None: off
    demangle: str = "full"
    go_symbols: bool = True           # Go function names from .gopclntab (pyroscope.ebpf's go_enabled)
    kernel_version_check: bool = True  # refuse kernels older than MIN_KERNEL before loading anything

    def validate(self, names: dict[str, str] | None = None) -> "EngineConfig":
        """Raise one ConfigError naming the field as the front door calls it; returns self."""
        n = {**DEFAULT_NAMES, **(names or {})}
        check_frequency(self.frequency, n["frequency"])
        t = self.off_cpu_threshold
        if not (math.isfinite(t) and 0 <= t <= 1) or (t == 0 and not self.cpu and not self.probe_links):
            raise ConfigError(f"{n['off_cpu_threshold']} {self.off_cpu_threshold}: must be in (0, 1] "
                              f"(0 turns off-CPU profiling off)")
        if self.unwind not in UNWIND_MODES:
            raise ConfigError(f"{n['unwind']} {self.unwind!r}: expected one of {', '.join(UNWIND_MODES)}")
        if self.demangle not in DEMANGLE_MODES:
            raise ConfigError(f"{n['demangle']} {self.demangle!r}: expected one of {', '.join(DEMANGLE_MODES)}")
        if not self.user_stacks and not self.kernel_stacks:
            raise ConfigError(f"{n['kernel_stacks']} and {n['user_stacks']} exclude each other")
        for pid in self.pids:
            if pid <= 0:
                raise ConfigError(f"{n['pids']} {pid}: not a process id")
        if self.pids and self.pids_at_run_time:
            raise ConfigError(f"{n['pids']}: fixed pids and pids set at run time exclude each other")
        return self


DEFAULT_NAMES = {"frequency": "sample rate", "off_cpu_threshold": "off-CPU threshold", "unwind": "unwind mode",
                 "demangle": "demangle", "kernel_stacks": "kernel-stacks-only", "user_stacks": "user-stacks-only",
                 "pids": "pid"}


def check_frequency(hz: int, name: str = "sample rate") -> None:
    """The one rule for sampling rates, for every front door."""
    if not MIN_FREQUENCY <= hz <= MAX_FREQUENCY:
        raise ConfigError(f"{name} {hz}: must be between {MIN_FREQUENCY} and {MAX_FREQUENCY} Hz")
