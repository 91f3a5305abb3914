"""perf events: open a sampling event per CPU and attach a BPF program to it."""

from __future__ import annotations

import struct

from . import syscalls as sc
from .maps import online_cpus
from .program import Program

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_FLAG_FD_CLOEXEC = 1 << 3

PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_DISABLE = 0x2401
PERF_EVENT_IOC_SET_BPF = 0x40042408

_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5: accepted by every kernel since 4.1
_FLAG_DISABLED = 1 << 0
_FLAG_FREQ = 1 << 10


def perf_event_attr(type_: int, config: int, *, frequency: int = 0, period: int = 0) -> bytes:
    attr = bytearray(_ATTR_SIZE)
    flags = _FLAG_DISABLED | (_FLAG_FREQ if frequency else 0)
    struct.pack_into("<IIQQQQQ", attr, 0, type_, _ATTR_SIZE, config, frequency or period, 0, 0, flags)
    return bytes(attr)


class PerfEvent:
    """One perf event fd (one CPU) with an optional BPF program attached."""

    def __init__(self, fd: int, cpu: int) -> None:
        self.fd = fd
        self.cpu = cpu

    @classmethod
    def open(cls, attr: bytes, cpu: int, pid: int = -1) -> "PerfEvent":
        buf = sc.new_attr(len(attr))
        buf.raw = attr
        return cls(sc.perf_event_open(buf, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC), cpu)

    def attach(self, program: Program) -> None:
        sc.ioctl(self.fd, PERF_EVENT_IOC_SET_BPF, program.fd, f"attach {program.name} to perf event")

    def enable(self) -> None:
        sc.ioctl(self.fd, PERF_EVENT_IOC_ENABLE, 0, "enable perf event")

    def disable(self) -> None:
        sc.ioctl(self.fd, PERF_EVENT_IOC_DISABLE, 0, "disable perf event")

    def close(self) -> None:
        if self.fd >= 0:
            sc.close(self.fd)
            self.fd = -1


def open_cpu_clock_events(frequency: int, program: Program, cpus: list[int] | None = None) -> list[PerfEvent]:
    """A software cpu-clock event at `frequency` Hz on each online CPU, `program` attached.

    All-or-nothing: on failure every event opened so far is closed.
    """
    attr = perf_event_attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, frequency=frequency)
    events: list[PerfEvent] = []
    try:
        for cpu in cpus if cpus is not None else online_cpus():
            event = PerfEvent.open(attr, cpu)
            events.append(event)
            event.attach(program)
        for event in events:
            event.enable()
    except BaseException:
        for event in events:
            event.close()
        raise
    return events
