"""Unwinder: a user-stack snapshot (registers + a copy of the stack) -> return addresses.

Each step finds the rule of the current pc in its file's table (.eh_frame rows),
computes the CFA, reads the return address and the saved RBP from the copy and
moves up. Where no rule exists (JIT code, anonymous or vDSO mappings, files
without unwind info such as Go binaries) it follows the frame pointer instead,
so Go and JIT frames in the middle of a stack do not end it.

Ends (`UnwindStats.ends`): "root" (a rule says the return address is undefined:
`_start`, `clone3`, thread start), "zero" (a zero return address or frame pointer
where frame pointers are followed: Go's goroutine start), "truncated"
(the next read is beyond the copied stack), "no-progress" (a bad rule or corrupt
stack would loop), "bad-fp" (no rule and no usable frame pointer), "depth".
"""

from __future__ import annotations

import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from ..procs import ProcessInfo, ProcessTable
from . import cfi
from .tables import MappedTable, TableStore

MAX_FRAMES = 127          # the frame-pointer path's limit (PERF_MAX_STACK_DEPTH)

# x86-64 rt_sigframe, as the signal trampoline sees it (the handler has popped pretcode):
# RSP points at struct ucontext; uc_mcontext starts 40 bytes in; gregs are r8..r15, rdi, rsi,
# rbp, rbx, rdx, rax, rcx, rsp, rip.
_MCONTEXT = 40
_SIG_RBP, _SIG_RSP, _SIG_RIP = _MCONTEXT + 10 * 8, _MCONTEXT + 15 * 8, _MCONTEXT + 16 * 8

_U64 = struct.Struct("<Q")


@dataclass
class UnwindStats:
    snapshots: int = 0
    frames: int = 0
    seconds: float = 0.0
    ends: Counter = field(default_factory=Counter)
    fp_steps: int = 0          # steps taken with frame pointers (no table row)


class Unwinder:
    def __init__(self, processes: ProcessTable, tables: TableStore | None = None) -> None:
        self.processes = processes
        self.tables = tables or TableStore()
        self._mapped: dict[tuple, MappedTable | None] = {}
        self._lock = threading.Lock()
        self.stats = UnwindStats()

    # -- per process ------------------------------------------------------------------------
    def _table_at(self, info: ProcessInfo, address: int) -> MappedTable | None:
        mapping = self.processes.find_mapping(info, address)
        if mapping is None or not mapping.is_file:
            return None
        key = (info.pid, info.start_time, mapping.start, mapping.inode)
        try:
            return self._mapped[key]
        except KeyError:
            pass
        mapped = self.tables.mapped(info, mapping)
        self._mapped[key] = mapped
        return mapped

    def needs_snapshots(self, info: ProcessInfo) -> bool:
        """Whether the process's main executable was built without frame pointers.

        Only the executable is parsed here (once per distinct binary): a Go binary or an
        executable built with frame pointers stays on the cheap in-kernel path; Debian's
        C programs (and everything else whose code omits them) get snapshots.
        """
        exe = info.exe[:-len(" (deleted)")] if info.exe.endswith(" (deleted)") else info.exe
        for mapping in info.mappings.mappings:
            if not mapping.is_file or mapping.file_path != exe:
                continue
            mapped = self._table_at(info, mapping.start)
            if mapped is None or mapped.table is None:
                return False
            return mapped.table.uses_frame_pointers is False
        return False

    def forget(self, pid: int) -> None:
        """Drop what is cached for an exited process (its tables stay in the store, per build id)."""
        with self._lock:
            for key in [k for k in list(self._mapped) if k[0] == pid]:   # list(): one step under the GIL
                self._mapped.pop(key, None)

    def cached_pids(self) -> set[int]:
        return {key[0] for key in list(self._mapped)}

    # -- one stack --------------------------------------------------------------------------
    def unwind(self, pid: int, ip: int, sp: int, bp: int, stack: bytes) -> tuple[tuple[int, ...], str]:
        """(addresses leaf first, how the walk ended)."""
        start = time.perf_counter()
        info = self.processes.get(pid)
        frames, end = self._walk(info, ip, sp, bp, stack) if info is not None else ((ip,) if ip else (), "no-process")
        stats = self.stats
        stats.snapshots += 1
        stats.frames += len(frames)
        stats.ends[end] += 1
        stats.seconds += time.perf_counter() - start
        return frames, end

    def _walk(self, info: ProcessInfo, ip: int, sp: int, bp: int, stack: bytes) -> tuple[tuple[int, ...], str]:
        base, limit = sp, len(stack) - 8
        unpack = _U64.unpack_from

        def read(address: int) -> int | None:
            off = address - base
            return unpack(stack, off)[0] if 0 <= off <= limit else None

        frames: list[int] = []
        exact = True          # ip is where the thread is, not a return address (leaf, after a signal)
        end = "depth"
        for _ in range(MAX_FRAMES):
            if ip == 0:
                end = "zero"
                break
            frames.append(ip)
            mapped = self._table_at(info, ip)
            rule = None
            if mapped is not None and mapped.table is not None:
                vaddr = ip - mapped.bias
                rule = mapped.table.find(vaddr if exact else vaddr - 1)
                if not exact and (rule is None or rule.kind != cfi.KIND_SIGNAL):
                    # A handler returns to the trampoline's first byte: look there too.
                    at = mapped.table.find(vaddr)
                    if at is not None and at.kind == cfi.KIND_SIGNAL:
                        rule = at
            if rule is None:
                self.stats.fp_steps += 1
                if bp == 0:
                    end = "zero"       # a zero frame pointer ends the chain (process, Go goroutine start)
                    break
                if bp < sp:
                    end = "bad-fp"
                    break
                ra, new_bp, new_sp = read(bp + 8), read(bp), bp + 16
                signal = False
            elif rule.kind == cfi.KIND_STOP:
                end = "root"
                break
            elif rule.kind == cfi.KIND_SIGNAL:
                ra, new_bp, new_sp = read(sp + _SIG_RIP), read(sp + _SIG_RBP), read(sp + _SIG_RSP)
                signal = True
            else:
                if rule.kind == cfi.KIND_CFA_SP:
                    cfa = sp + rule.cfa_offset
                elif rule.kind == cfi.KIND_CFA_FP:
                    cfa = bp + rule.cfa_offset
                else:   # KIND_PLT
                    cfa = sp + rule.cfa_offset + (8 if (ip & 15) >= rule.rbp_offset else 0)
                ra = read(cfa + rule.ra_offset)
                new_bp = bp if rule.kind == cfi.KIND_PLT or rule.rbp_offset == cfi.RBP_SAME \
                    else read(cfa + rule.rbp_offset)
                new_sp = cfa
                signal = False
            if ra is None or new_sp is None:
                end = "truncated"
                break
            if new_sp <= sp and not signal:
                end = "no-progress"
                break
            ip, sp, bp, exact = ra, new_sp, new_bp if new_bp is not None else 0, signal
        return tuple(frames), end
