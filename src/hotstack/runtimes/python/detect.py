"""Is a process a CPython interpreter, which version, and where do its runtime structures live?

CPython is either a shared `libpython3.X.so` or linked into the `python3.X` executable.
The ELF file that defines `_PyRuntime` is the interpreter; its version comes from
`_Py_DebugOffsets` (3.13+), from `Py_Version` (3.11+) or from the file name.
"""

from __future__ import annotations

import os
import re
import struct
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import procs
from ...symbols.elf import ElfError, ElfFile
from ..common.files import Unreadable, interpreter_files, jump_targets, symbol_spans
from ..common.memory import MemoryReadError, ReadThrough
from .offsets import DEBUG_COOKIE, DEBUG_SIZE, PyOffsets, free_threaded, from_debug_offsets, table_offsets

_NAME = re.compile(r"(?:^|/)(?:lib)?python(\d)\.(\d+)[^/]*$")     # a version in the name
# files that may be an interpreter: a copy or a link named `python3` is one too (its version is in
# the file: Py_Version, _Py_DebugOffsets)
_FILE = re.compile(r"(?:^|/)(?:lib)?python[^/]*$")
_EVAL_LOOP = b"_PyEval_EvalFrameDefault"
_WANTED = (b"_PyRuntime", b"_Py_NoneStruct", b"Py_Version")


@dataclass(frozen=True)
class PythonBinary:
    """What one interpreter file tells us, independent of any process (cacheable per file)."""

    path: str
    version: tuple[int, int]
    offsets: PyOffsets
    runtime: int            # ELF virtual address of _PyRuntime
    none: int               # ELF virtual address of _Py_NoneStruct
    eval_loop: tuple[int, int] = (0, 0)   # ELF virtual address and size of the evaluation loop
    # [start, end) of parts of the loop the compiler split out (GCC's .cold), where no symbol names them
    eval_parts: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class PythonProcess(ReadThrough):
    pid: int
    binary: PythonBinary
    base: int               # load bias of the interpreter file
    runtime: int            # _PyRuntime in the process
    none: int
    interp: int             # the main interpreter state; 0: not made yet (provisional)
    threads_head: int       # address of interp->threads.head (read each sample: threads come and go); 0: not known
    file_name: str = ""     # the interpreter file's name as the process maps it (its frames' module)
    interp_ptr: int = 0     # where _PyRuntime holds the interpreter pointer
    process: procs.Process | None = None     # what it was read through (None: the live process `pid`)

    @property
    def provisional(self) -> bool:
        """Listed before its interpreter was made (a process seen at its exec): the walker finds the
        interpreter through interp_ptr until a later look confirms it (runtimes/common/retries.py)."""
        return self.interp == 0

    @property
    def eval_loop(self) -> tuple[int, int]:
        """[start, end) of the evaluation loop's code in the process; (0, 0): not known."""
        start, size = self.binary.eval_loop
        return (self.base + start, self.base + start + size) if size else (0, 0)

    @property
    def eval_part(self) -> tuple[int, int]:
        """[start, end) in the process of the part of the evaluation loop its compiler split out
        (the largest, if ever more than one: GCC makes one .cold part); (0, 0): none."""
        if not self.binary.eval_parts:
            return (0, 0)
        start, end = max(self.binary.eval_parts, key=lambda part: part[1] - part[0])
        return (self.base + start, self.base + end)

    @property
    def version(self) -> tuple[int, int]:
        return self.binary.version

    @property
    def offsets(self) -> PyOffsets:
        return self.binary.offsets


def inspect_binary(path: str, name_hint: str = "") -> PythonBinary | None:
    """The interpreter facts of one ELF file, or None if it does not define `_PyRuntime`; Unreadable
    if it does and its version or layout cannot be read."""
    try:
        with ElfFile(path) as elf:
            spans = symbol_spans(elf, _WANTED + (_EVAL_LOOP,))
            syms = {name: value for name, (value, _size) in spans.items()}
            runtime = syms.get(b"_PyRuntime")
            if runtime is None or b"_Py_NoneStruct" not in syms:
                return None
            offsets, free = None, False
            off = elf.vaddr_to_file_offset(runtime)
            if off is not None and off + DEBUG_SIZE <= elf.size and elf.read(off, 8) == DEBUG_COOKIE:
                blob = elf.read(off, DEBUG_SIZE)
                offsets, free = from_debug_offsets(blob), free_threaded(blob)
            version = offsets.version if offsets else None
            if version is None and b"Py_Version" in syms:
                voff = elf.vaddr_to_file_offset(syms[b"Py_Version"])
                if voff is not None:
                    hexversion = struct.unpack("<I", elf.read(voff, 4))[0]
                    version = (hexversion >> 24, (hexversion >> 16) & 0xFF)
            if version is None:
                m = _NAME.search(name_hint or path)
                if not m:
                    raise Unreadable("its version is neither in the file (Py_Version, _Py_DebugOffsets) nor in its name")
                version = (int(m.group(1)), int(m.group(2)))
            shown = ".".join(map(str, version))
            if free:        # not the table's offsets either: its thread states and frames differ
                raise Unreadable(f"a free-threaded build of CPython {shown}: its frames are not read", shown)
            offsets = offsets or table_offsets(version)
            if offsets is None:
                raise Unreadable(f"no structure offsets known for CPython {shown}", shown)
            if not offsets.fits_walker:     # no Python frames, never wrong ones
                raise Unreadable("a frame layout the kernel walker cannot read", shown)
            loop = spans.get(_EVAL_LOOP, (0, 0))
            parts = () if elf.section(".symtab") is not None or not loop[1] else split_parts(elf, *loop)
            return PythonBinary(path, version, offsets, runtime, syms[b"_Py_NoneStruct"], loop, parts)
    except (ElfError, OSError, ValueError, struct.error):
        return None


def split_parts(elf: ElfFile, start: int, size: int) -> tuple[tuple[int, int], ...]:
    """[start, end) of each part of the function at [start, start + size) that the compiler split
    out (GCC's .cold partition: with computed gotos, 3.14's evaluation loop runs most of its
    handlers there): a function of .eh_frame_hdr's table that the function jumps to and that jumps
    back into it. Read from a stripped file, which names none of them."""
    index = elf.function_index()
    off = elf.vaddr_to_file_offset(start)
    if index is None or off is None:
        return ()
    starts, end = index[0], start + size
    parts = []
    for target in set(jump_targets(elf.read(off, size), start)):
        if start <= target < end:
            continue
        j = int(np.searchsorted(starts, target, side="right")) - 1
        if j < 0 or j + 1 >= len(starts):
            continue
        lo, hi = int(starts[j]), int(starts[j + 1])
        part_off = elf.vaddr_to_file_offset(lo)
        if (lo, hi) in parts or part_off is None or hi - lo > 1 << 22:
            continue
        if any(start <= back < end for back in jump_targets(elf.read(part_off, hi - lo), lo)):
            parts.append((lo, hi))
    return tuple(sorted(parts))


def find_interpreter(mem: procs.Process, runtime: int, o: PyOffsets,
                     nearby: Callable[[], bool] = lambda: True) -> tuple[int, int, int] | None:
    """(interp, address of interp->threads.head, where _PyRuntime holds interp), checked through the
    back pointer tstate->interp.

    The table's interpreters_head can drift between patch releases; when the check fails and
    `nearby()` (asked only then), nearby slots of _PyRuntime are tried (the interpreter is the one its threads point
    back to). Not in a process that is starting: while its interpreter is being made, another
    slot can point to a structure that passes the check for a moment (Debian 12's python3, 1-3 ms
    after its exec: _PyRuntime + 80, a heap block gone ~0.3 ms later).
    """
    def check(head_off: int) -> tuple[int, int, int] | None:
        try:
            interp = mem.u64(runtime + head_off)
            if interp == 0 or interp & 7:
                return None
            tstate = mem.u64(interp + o.threads_head)
            if tstate == 0 or tstate & 7 or mem.u64(tstate + o.tstate_interp) != interp:
                return None
            return interp, interp + o.threads_head, runtime + head_off
        except MemoryReadError:
            return None

    found = check(o.interpreters_head)
    if found or not nearby():
        return found
    for delta in range(8, 257, 8):
        for head_off in (o.interpreters_head - delta, o.interpreters_head + delta):
            if head_off >= 0 and (found := check(head_off)):
                return found
    return None


def still_starting(mem: procs.Process, runtime: int, o: PyOffsets) -> bool:
    """Whether this _PyRuntime can be read though no interpreter was confirmed in it: the interpreter
    not made yet (interpreters.head still the NULL of the file's data: a process seen at its exec,
    in the loader) or being made (its first thread state not linked yet), or a patch release whose
    slot find_interpreter tried in vain. The walker reads the slot at each thread-state look-up and
    takes only a thread state naming the sampled thread; the retry ladder confirms the process or,
    at its end, unlists it and says so."""
    try:
        mem.u64(runtime + o.interpreters_head)
    except MemoryReadError:
        return False
    return True


# A process younger than this is starting: its interpreter is found in _PyRuntime's own slot only
# (find_interpreter), or it is listed provisionally, as one whose interpreter is not made yet.
STARTING_S = 0.1
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def starting(process: procs.Process) -> bool:
    """Whether the process started less than STARTING_S ago (its /proc/PID/stat start time: clock
    ticks of the boot clock)."""
    stat = process.stat()
    return stat is not None and time.clock_gettime(time.CLOCK_BOOTTIME) - stat[0] / _TICKS_PER_S < STARTING_S


_binaries: dict[tuple, PythonBinary | None] = {}


def detect(process: procs.Process | int) -> PythonProcess | None:
    """The CPython interpreter running in `pid`, or None (not Python, not initialized yet, or gone).
    A process is looked into if a file it runs is named for Python (libpython in an embedding
    program too), or its executable is CPython's by what it holds."""
    process = procs.as_process(process)
    for binary, at in interpreter_files(process, "python", "CPython",
                                        lambda p: "python" in p.exec_paths(recent=True), "python",
                                        _FILE, "libpython", _binaries, inspect_binary):
        mem, runtime, o = process, at.base + binary.runtime, binary.offsets
        found = find_interpreter(mem, runtime, o, nearby=lambda: not starting(process))
        if found is not None:
            interp, threads_head, interp_ptr = found
        elif still_starting(mem, runtime, o):
            # listed now, so that its first samples have Python frames (a run of 0.15 s is over
            # before a retry): the walker finds the interpreter once it is made
            interp, threads_head, interp_ptr = 0, 0, runtime + o.interpreters_head
        else:
            return None
        return PythonProcess(process.pid, binary, at.base, runtime, at.base + binary.none, interp, threads_head,
                             at.file_name, interp_ptr, process)
    return None
