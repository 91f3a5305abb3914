"""Code objects -> qualified name, file and line, read from the target's memory, or from the copies
the kernel walker made of them (bpf/python.h py_snap_codes) while the process ran.

A code object is identified by (pid, address, checksum): the checksum, taken when the frame
was sampled, folds co_argcount, co_flags and co_firstlineno, so an address freed and reused
by another code object does not return the old name. Entries of a process go with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

from ...profile.model import Frame, FrameKind
from .linetable import line_for
from ... import procs
from ...procs.memory import MemoryView
from ..common.memory import MemoryReadError
from .offsets import NONE, PyOffsets

MAX_STRING = 1024            # characters of a name or file name we read
MAX_LINETABLE = 1 << 18
MAX_CODES_PER_PROCESS = 50_000
MAX_FRAMES_PER_PROCESS = 200_000


def checksum(argcount: int, flags: int, firstlineno: int) -> int:
    """The same fold the BPF walker computes (u32 arithmetic)."""
    return ((argcount << 25) + (flags << 10) + firstlineno) & 0xFFFFFFFF


@dataclass(frozen=True)
class CodeInfo:
    name: str
    filename: str
    firstlineno: int
    linetable: bytes
    checksum: int
    complete: bool = True       # False: `linetable` is its first part (a copy cut short)


def read_str(mem: procs.Process, o: PyOffsets, address: int) -> str:
    """A str object's text (compact strings; the legacy non-compact form gives '?')."""
    head = mem.read(address, o.unicode_state + 4)
    length = struct.unpack_from("<q", head, 16)[0]
    state = struct.unpack_from("<I", head, o.unicode_state)[0]
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or kind not in (1, 2, 4) or length < 0:
        return "?"
    length = min(length, MAX_STRING)
    data = mem.read(address + (o.ascii_data if ascii_ else o.compact_data), length * kind)
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
    return data.decode(codec, "replace")


def read_bytes(mem: procs.Process, o: PyOffsets, address: int) -> bytes:
    size = mem.u64(address + o.bytes_size)
    if size > MAX_LINETABLE:
        raise MemoryReadError(f"line table of {size} bytes")
    return mem.read(address + o.bytes_data, size)


def whole_table(mem, o: PyOffsets, address: int) -> tuple[bytes, bool]:
    return read_bytes(mem, o, address), True


def read_code(mem, o: PyOffsets, address: int, read_table=whole_table) -> CodeInfo:
    """The code object at `address`; `read_table(mem, o, address)` gives its line table and whether
    it is whole (a process's memory: read_bytes, whole)."""
    argcount = mem.u32(address + o.co_argcount)
    flags = mem.u32(address + o.co_flags)
    firstlineno = mem.i32(address + o.co_firstlineno)
    name_ptr = mem.u64(address + (o.co_qualname if o.co_qualname != NONE else o.co_name))
    table, complete = read_table(mem, o, mem.u64(address + o.co_linetable))
    return CodeInfo(
        name=read_str(mem, o, name_ptr),
        filename=read_str(mem, o, mem.u64(address + o.co_filename)),
        firstlineno=firstlineno,
        linetable=table,
        checksum=checksum(argcount, flags, firstlineno & 0xFFFFFFFF),
        complete=complete)


class CopiedMemory(MemoryView):
    """The memory of a process as the walker copied parts of it (a py_code_snap): reads inside a
    copied part are served, others raise MemoryReadError, as a Process's of freed memory do."""

    def __init__(self, parts: Sequence[tuple[int, bytes]]) -> None:
        self._parts = [(address, data) for address, data in parts if address and data]

    def read(self, address: int, size: int) -> bytes:
        return self.prefix(address, size, whole=True)

    def prefix(self, address: int, size: int, whole: bool = False) -> bytes:
        """Up to `size` bytes at `address`, as many as were copied (`whole`: all of them, or
        MemoryReadError)."""
        for start, data in self._parts:
            if start <= address and (address + size <= start + len(data) or not whole and address <= start + len(data)):
                return bytes(data[address - start:address - start + size])
        raise MemoryReadError(f"{size} bytes at {address:#x} not copied")


def copied_table(mem: CopiedMemory, o: PyOffsets, address: int) -> tuple[bytes, bool]:
    """A line table as far as the walker copied it, and whether that is all of it."""
    size = mem.u64(address + o.bytes_size)
    table = mem.prefix(address + o.bytes_data, size)
    return table, len(table) == size


def copied_code(o: PyOffsets, snap) -> CodeInfo | None:
    """A code object from the walker's copy (a schema.PY_CODE_SNAP record), or None if its name or
    file name was not copied whole; a line table longer than the copy is kept as its first part."""
    mem = CopiedMemory(((snap.code, snap.code_bytes[:snap.code_len]), (snap.name_addr, snap.name_bytes[:snap.name_len]),
                        (snap.file_addr, snap.file_bytes[:snap.file_len]),
                        (snap.lines_addr, snap.lines_bytes[:snap.lines_len])))
    try:
        return read_code(mem, o, snap.code, copied_table)
    except (MemoryReadError, UnicodeDecodeError, struct.error):
        return None


def lasti_of(o: PyOffsets, code: int, instr: int) -> int:
    """The frame's instruction offset in the unit its line table uses."""
    if o.instr_is_pointer:
        return (instr - (code + o.co_code_adaptive)) // 2
    lasti = instr & 0xFFFFFFFF
    return lasti - (1 << 32) if lasti >= 1 << 31 else lasti


class CodeCache:
    """Per-process cache of code objects read from the target, and of the frames made from them.

    A frame is the same for the same (code object, instruction): hot frames recur in every
    interval, and decoding a line table per frame was the largest cost of a busy Python host.
    """

    def __init__(self) -> None:
        self._codes: dict[int, dict[tuple[int, int], CodeInfo | None]] = {}
        # per process, a recorded frame (the tuple the walker stored) -> its named frame: see frames()
        self._by_record: dict[int, dict[tuple, Frame]] = {}
        # per process, copies whose line table was cut short: used when the process cannot be read
        self._partial: dict[int, dict[tuple[int, int], CodeInfo]] = {}
        self.reads = 0
        self.misses = 0
        self.copies = 0         # code objects named from the walker's copies

    def frame(self, process: procs.Process | int, o: PyOffsets, code: int, instr: int, sampled_checksum: int | None
              ) -> Frame:
        """The named frame of one (code object, instruction); `sampled_checksum` None: not checked."""
        return self.frames(process, o, [(code, instr, sampled_checksum, 0)])[0]

    def frames(self, process: procs.Process | int, o: PyOffsets, records: Sequence[tuple]) -> list[Frame]:
        """The named frame of each recorded frame (a RawPyFrame: code object, instruction, checksum,
        marker), in one C-level pass over those named before. A deep recursion's ~60 frames, each
        a Python call and two dict lookups, would be most of the naming of a new Python stack, and
        every sample of a recursion at another depth or leaf is a new stack. `process`: the process
        its memory is read through, or the pid of a live one."""
        pid = process if isinstance(process, int) else process.pid
        by_record = self._by_record.get(pid)
        if by_record is None:
            by_record = self._by_record[pid] = {}
        out = list(map(by_record.get, records))
        if all(out):        # (a Frame is always true: `None in` would call Frame.__eq__ per frame)
            return out
        if len(by_record) >= MAX_FRAMES_PER_PROCESS:
            by_record.clear()
        for i, record in enumerate(records):
            if out[i] is None:
                made = out[i] = self._make_frame(process, pid, o, record[0], record[1], record[2])
                if made.resolved:        # an unreadable code object is read again next time
                    by_record[record] = made
        return out

    def add_copies(self, o_of, snaps: Sequence) -> None:
        """Code objects the walker copied (schema.PY_CODE_SNAP records), `o_of(pid)` the offsets of a
        listed process (None: not listed now, dropped). A whole copy names its frames with no read of
        the process; one whose line table was cut short is used only if the process cannot be read."""
        for snap in snaps:
            o = o_of(snap.pid)
            info = copied_code(o, snap) if o is not None else None
            if info is None or info.checksum != snap.checksum:
                continue
            codes = self._codes.setdefault(snap.pid, {})
            if len(codes) >= MAX_CODES_PER_PROCESS:
                codes.clear()
            if info.complete:
                codes[(snap.code, snap.checksum)] = info
            else:
                self._partial.setdefault(snap.pid, {})[(snap.code, snap.checksum)] = info
            self.copies += 1

    def _make_frame(self, process: procs.Process | int, pid: int, o: PyOffsets, code: int, instr: int,
                    sampled_checksum: int | None) -> Frame:
        codes = self._codes.setdefault(pid, {})
        key = (code, sampled_checksum if sampled_checksum is not None else -1)
        info = codes.get(key, False)
        if info is False:
            self.reads += 1
            try:
                info = read_code(procs.as_process(process), o, code)
            except (MemoryReadError, UnicodeDecodeError, struct.error):
                info = self._partial.get(pid, {}).get(key)     # (the process is gone: the copy)
            if info is not None and sampled_checksum is not None and info.checksum != sampled_checksum:
                info = None     # freed and reused by another code object since the sample
            if len(codes) >= MAX_CODES_PER_PROCESS:
                codes.clear()
            if info is not None:
                codes[key] = info
        if info is None:
            self.misses += 1
            return Frame("[unknown python]", FrameKind.PYTHON, resolved=False)
        line = line_for(o.version, info.linetable, info.firstlineno, lasti_of(o, code, instr), info.complete)
        return Frame(info.name, FrameKind.PYTHON, file=info.filename, line=line)

    def forget(self, pid: int) -> None:
        self._codes.pop(pid, None)
        self._partial.pop(pid, None)
        self._by_record.pop(pid, None)
