"""Links: attach loaded programs to probes and tracepoints, and detach them on close.

- uprobes/uretprobes and kprobes/kretprobes: a perf event of the kernel's dynamic
  `uprobe`/`kprobe` PMU (`/sys/bus/event_source/devices/*/type`), no tracefs needed;
  the program is set on it with PERF_EVENT_IOC_SET_BPF.
- tracing programs (fentry, fexit, tp_btf): loaded with the kernel BTF id of their
  target (`resolve_btf_targets`), attached with BPF_RAW_TRACEPOINT_OPEN.
- raw tracepoints: BPF_RAW_TRACEPOINT_OPEN by name.

The loader knows nothing of symbols: callers give uprobes a file offset.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from . import syscalls as sc
from .btf import KIND_FUNC, KIND_TYPEDEF, Btf, kernel_btf
from .errors import EbpfError, SyscallError
from .perf import PerfEvent
from .program import Program
from .spec import CollectionSpec, ProgramSpec

BPF_RAW_TRACEPOINT_OPEN = 17
PMU_DIR = "/sys/bus/event_source/devices"

TRACING_PROG_TYPE = 26


class MissingKernelFeature(EbpfError):
    """The running kernel lacks what a link needs; the message names the config option."""


class Link:
    """One attachment; close() detaches it."""

    def __init__(self, fd: int, description: str, event: PerfEvent | None = None) -> None:
        self.fd = fd
        self.description = description
        self._event = event

    def close(self) -> None:
        if self._event is not None:
            try:
                self._event.disable()
            except SyscallError:
                pass
            self._event.close()
            self._event = None
            self.fd = -1
        elif self.fd >= 0:
            sc.close(self.fd)
            self.fd = -1

    def __repr__(self) -> str:
        return f"Link({self.description!r}, fd={self.fd})"


# -- dynamic PMUs (uprobe, kprobe) ----------------------------------------------------------------
def pmu_available(name: str) -> bool:
    return os.path.exists(f"{PMU_DIR}/{name}/type")


def _pmu_type(name: str, option: str) -> int:
    try:
        with open(f"{PMU_DIR}/{name}/type") as f:
            return int(f.read())
    except (OSError, ValueError):
        raise MissingKernelFeature(f"this kernel has no {name} perf PMU ({option} is off)", errno.ENOENT) from None


def _retprobe_bit(name: str) -> int:
    """The config bit that makes a probe a return probe (the PMU's `format/retprobe`, e.g. `config:0`)."""
    try:
        with open(f"{PMU_DIR}/{name}/format/retprobe") as f:
            return int(f.read().strip().split(":")[1])
    except (OSError, ValueError, IndexError):
        return 0


def _probe_attr(pmu: int, config: int, config1: int, config2: int) -> bytes:
    # perf_event_attr: config1 (offset 56) and config2 (offset 64) carry the probe's target.
    attr = bytearray(112)
    struct.pack_into("<IIQ", attr, 0, pmu, len(attr), config)
    struct.pack_into("<Q", attr, 40, 1)          # flags: disabled
    struct.pack_into("<QQ", attr, 56, config1, config2)
    return bytes(attr)


def _open_probe(pmu_name: str, option: str, retprobe: bool, target: bytes, config2: int,
                pid: int, program: Program, description: str) -> Link:
    pmu = _pmu_type(pmu_name, option)
    config = (1 << _retprobe_bit(pmu_name)) if retprobe else 0
    target_buf = ctypes.create_string_buffer(target)
    attr = _probe_attr(pmu, config, ctypes.addressof(target_buf), config2)
    # A probe fires wherever the probed code runs: one event (cpu 0 when system-wide) is enough.
    try:
        event = PerfEvent.open(attr, cpu=0 if pid < 0 else -1, pid=pid)
    except SyscallError as e:
        raise SyscallError(f"{description}: {e}", e.errno) from None
    try:
        event.attach(program)
        event.enable()
    except BaseException:
        event.close()
        raise
    return Link(event.fd, description, event)


def attach_uprobe(program: Program, path: str, offset: int, *, retprobe: bool = False, pid: int = -1) -> Link:
    """Attach a kprobe-type program at file `offset` of `path` (every process that maps it, or `pid`)."""
    kind = "uretprobe" if retprobe else "uprobe"
    return _open_probe("uprobe", "CONFIG_UPROBE_EVENTS", retprobe, os.fsencode(path), offset, pid, program,
                       f"{kind} {path}+{offset:#x}")


def attach_kprobe(program: Program, symbol: str, *, retprobe: bool = False, offset: int = 0) -> Link:
    """Attach a kprobe-type program to kernel function `symbol`; needs CONFIG_KPROBES."""
    kind = "kretprobe" if retprobe else "kprobe"
    return _open_probe("kprobe", "CONFIG_KPROBES", retprobe, symbol.encode(), offset, -1, program,
                       f"{kind} {symbol}")


# -- BPF_RAW_TRACEPOINT_OPEN: raw tracepoints and tracing programs -----------------------------------
def _raw_tracepoint_open(program: Program, name: str | None, description: str) -> Link:
    attr = sc.new_attr()
    name_buf = ctypes.create_string_buffer(name.encode()) if name else None
    struct.pack_into("<QI", attr, 0, sc.address(name_buf), program.fd)
    return Link(sc.bpf(BPF_RAW_TRACEPOINT_OPEN, attr, description), description)


def attach_raw_tracepoint(program: Program, name: str) -> Link:
    return _raw_tracepoint_open(program, name, f"attach {program.name} to raw tracepoint {name}")


def attach_tracing(program: Program) -> Link:
    """Attach an fentry/fexit/tp_btf program to the target it was loaded for."""
    return _raw_tracepoint_open(program, None, f"attach {program.name} ({program.spec.section})")


# -- BTF attach targets -----------------------------------------------------------------------------
def btf_target_id(kind: str, target: str, btf: Btf | None = None) -> int:
    """The kernel BTF id a tracing program of `kind` (fentry, fexit, tp_btf) attaches to.

    Raises KeyError if the kernel's BTF does not describe `target`.
    """
    btf = btf or kernel_btf()
    if kind == "tp_btf":
        return btf.find("btf_trace_" + target, KIND_TYPEDEF).id
    if kind in ("fentry", "fexit", "fmod_ret"):
        return btf.find(target, KIND_FUNC).id
    raise ValueError(f"{kind} programs have no BTF attach target")


def tracing_variant(spec: ProgramSpec, target: str, btf: Btf | None = None) -> ProgramSpec:
    """A copy of a tracing program spec aimed at `target` (one load per target function)."""
    kind = spec.section.split("/")[0]
    clone = ProgramSpec(**{**spec.__dict__})
    clone.instructions = bytearray(spec.instructions)
    clone.map_relocations = list(spec.map_relocations)
    clone.section = f"{kind}/{target}"
    clone.attach_btf_id = btf_target_id(kind, target, btf)
    return clone


def resolve_btf_targets(spec: CollectionSpec, btf: Btf | None = None) -> None:
    """Set attach_btf_id of every tracing program whose section names its target (`fentry/FUNC`).

    Raises MissingKernelFeature when the kernel has no BTF or its BTF lacks a target.
    """
    for prog in spec.programs.values():
        kind, _, target = prog.section.partition("/")
        if prog.prog_type != TRACING_PROG_TYPE or not target or prog.attach_btf_id:
            continue
        try:
            prog.attach_btf_id = btf_target_id(kind, target, btf)
        except FileNotFoundError:
            raise MissingKernelFeature(f"{prog.name} needs the kernel's BTF (CONFIG_DEBUG_INFO_BTF)",
                                       errno.ENOENT) from None
        except KeyError:
            raise MissingKernelFeature(f"{prog.name}: the kernel's BTF has no {target}", errno.ENOENT) from None
