"""Errors of the eBPF loader. The loader never logs or exits; it raises these."""

from __future__ import annotations

import errno
import os


class EbpfError(Exception):
    """Base class of every loader error."""

    def __init__(self, message: str, err: int = 0) -> None:
        super().__init__(message)
        self.errno = err


class SyscallError(EbpfError):
    """A bpf() or perf_event_open() call failed; `errno` says how."""

    @classmethod
    def from_errno(cls, what: str, err: int) -> "SyscallError":
        return cls(f"{what}: {os.strerror(err)} ({errno.errorcode.get(err, err)})", err)


class VerifierError(EbpfError):
    """The kernel verifier rejected a program; the log tells why."""

    def __init__(self, program: str, err: int, log: str) -> None:
        self.program = program
        self.log = log
        tail = "\n".join(line for line in log.strip().splitlines()[-6:])
        super().__init__(f"the kernel verifier rejected program {program!r} ({os.strerror(err)}):\n{tail}", err)

    def log_tail(self, lines: int = 8) -> str:
        return "\n".join(self.log.strip().splitlines()[-lines:])

    def short(self) -> str:
        """The last meaningful line of the log, for one-line messages."""
        lines = [line for line in self.log.strip().splitlines() if line.strip()]
        return lines[-1] if lines else os.strerror(self.errno)


class ObjectFormatError(EbpfError):
    """The BPF ELF object is malformed or uses a feature this loader lacks."""
