"""Program: a loaded BPF program, with the verifier log on failure and run-time stats."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import signal
import struct
from dataclasses import dataclass

from . import syscalls as sc
from .errors import SyscallError, VerifierError
from .func_info import FUNC_INFO, func_btf, func_info, load_func_btf
from .spec import ProgramSpec

LOG_SIZE = 1 << 20


@dataclass(frozen=True)
class ProgramStats:
    run_time_ns: int
    run_count: int


class Program:
    def __init__(self, spec: ProgramSpec, fd: int) -> None:
        self.spec = spec
        self.name = spec.name
        self.fd = fd

    @classmethod
    def load(cls, spec: ProgramSpec, instructions: bytes) -> "Program":
        """Load; on failure retry with a verifier log so the error can say why."""
        try:
            return cls(spec, _prog_load(spec, instructions, log_level=0))
        except SyscallError as first:
            if first.errno not in (errno.EACCES, errno.EINVAL, errno.E2BIG, errno.ENOSPC):
                raise
        log = ctypes.create_string_buffer(LOG_SIZE)
        try:
            fd = _prog_load(spec, instructions, log_level=1, log=log)
        except SyscallError as second:
            text = log.value.decode("utf-8", "replace")
            if not text.strip():
                raise
            raise VerifierError(spec.name, second.errno, text) from None
        return cls(spec, fd)  # loaded the second time: a transient failure

    def _info(self) -> ctypes.Array:
        """The kernel's struct bpf_prog_info of the program (fields it does not know stay 0)."""
        info = ctypes.create_string_buffer(256)
        attr = sc.new_attr()
        struct.pack_into("<IIQ", attr, 0, self.fd, len(info), sc.address(info))
        sc.bpf(sc.BPF_OBJ_GET_INFO_BY_FD, attr, f"info of program {self.name}")
        return info

    def stats(self) -> ProgramStats:
        """Run time and run count (counted only while BPF stats are enabled)."""
        run_time_ns, run_cnt = struct.unpack_from("<QQ", self._info(), 192)
        return ProgramStats(run_time_ns, run_cnt)

    def verified_instructions(self) -> int:
        """Instructions the verifier went through to accept the program (its cost at every load;
        bpf_prog_info.verified_insns, 0 on kernels before 5.16)."""
        return struct.unpack_from("<I", self._info(), 216)[0]

    def function_records(self) -> int:
        """The BTF function records the program was loaded with (bpf_prog_info.nr_func_info)."""
        return struct.unpack_from("<I", self._info(), 144)[0]

    def close(self) -> None:
        if self.fd >= 0:
            sc.close(self.fd)
            self.fd = -1


LOAD_ATTEMPTS = 5


def _prog_load(spec: ProgramSpec, instructions: bytes, log_level: int, log=None) -> int:
    insns = ctypes.create_string_buffer(instructions, len(instructions))
    license = ctypes.create_string_buffer(spec.license.encode())
    attr = sc.new_attr()
    struct.pack_into("<IIQQIIQ", attr, 0, spec.prog_type, len(instructions) // 8, sc.address(insns),
                     sc.address(license), log_level, len(log) if log is not None else 0, sc.address(log))
    name = spec.name.encode()[:15]
    ctypes.memmove(ctypes.addressof(attr) + 48, name, len(name))
    struct.pack_into("<I", attr, 68, spec.attach_type)
    struct.pack_into("<I", attr, 108, spec.attach_btf_id)
    btf_fd = -1
    if spec.takes_function_address or spec.global_functions:
        blob, main_id = func_btf(spec.name, [(name, spec.global_functions.get(name)) for _, name in spec.functions])
        btf_fd = load_func_btf(blob, spec.name)
        records = ctypes.create_string_buffer(func_info([index for index, _ in spec.functions], main_id))
        struct.pack_into("<IIQI", attr, 72, btf_fd, FUNC_INFO.size, sc.address(records), len(spec.functions) + 1)
    try:
        return _prog_load_attr(spec, attr)
    finally:
        if btf_fd >= 0:
            sc.close(btf_fd)


def _prog_load_attr(spec: ProgramSpec, attr) -> int:
    # The verifier gives up with EAGAIN when a signal arrives while it works (a child exits, the
    # terminal is resized, a tracer stops us), and our largest program takes it seconds. So signals
    # wait (blocked in this thread, delivered when the load returns, so Ctrl-C still stops the start
    # after at most one program), and a load cut short anyway (a ptrace stop) is tried again.
    with _signals_blocked():
        for attempt in range(LOAD_ATTEMPTS):
            try:
                return sc.bpf(sc.BPF_PROG_LOAD, attr, f"load program {spec.name}")
            except SyscallError as error:
                if error.errno != errno.EAGAIN or attempt == LOAD_ATTEMPTS - 1:
                    raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _signals_blocked():
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def enable_run_time_stats() -> int:
    """Turn on kernel-wide BPF run-time accounting; it stays on while the fd is open."""
    attr = sc.new_attr()
    struct.pack_into("<I", attr, 0, 0)  # BPF_STATS_RUN_TIME
    return sc.bpf(sc.BPF_ENABLE_STATS, attr, "enable BPF run-time stats")
