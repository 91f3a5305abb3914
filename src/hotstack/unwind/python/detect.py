"""Is a process a CPython interpreter, which version, and where do its runtime structures live?

CPython is either a shared `libpython3.X.so` or linked into the `python3.X` executable.
The ELF file that defines `_PyRuntime` is the interpreter; its version comes from
`_Py_DebugOffsets` (3.13+), from `Py_Version` (3.11+) or from the file name.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

import numpy as np

from ... import procs
from ...procs.maps import Mapping, parse_maps
from ...symbols.elf import SHT_DYNSYM, SHT_SYMTAB, ElfError, ElfFile
from .memory import MemoryReadError, ProcessMemory
from .offsets import DEBUG_COOKIE, DEBUG_SIZE, PyOffsets, from_debug_offsets, table_offsets

_NAME = re.compile(r"(?:^|/)(?:lib)?python(\d)\.(\d+)[^/]*$")
_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                 ("size", "<u8")])
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


@dataclass(frozen=True)
class PythonProcess:
    pid: int
    binary: PythonBinary
    base: int               # load bias of the interpreter file
    runtime: int            # _PyRuntime in the process
    none: int
    interp: int             # the main interpreter state
    threads_head: int       # address of interp->threads.head (read each sample: threads come and go)

    @property
    def eval_loop(self) -> tuple[int, int]:
        """[start, end) of the evaluation loop's code in the process; (0, 0): not known."""
        start, size = self.binary.eval_loop
        return (self.base + start, self.base + start + size) if size else (0, 0)

    @property
    def version(self) -> tuple[int, int]:
        return self.binary.version

    @property
    def offsets(self) -> PyOffsets:
        return self.binary.offsets


def _symbols(elf: ElfFile, names: tuple[bytes, ...]) -> dict[bytes, int]:
    """The value of each of `names` that the file's dynamic (else full) symbol table defines."""
    return {name: value for name, (value, _size) in _symbol_spans(elf, names).items()}


def _symbol_spans(elf: ElfFile, names: tuple[bytes, ...]) -> dict[bytes, tuple[int, int]]:
    """(value, size) of each of `names` that the file's dynamic (else full) symbol table defines."""
    found: dict[bytes, tuple[int, int]] = {}
    for kind in (SHT_DYNSYM, SHT_SYMTAB):
        for s in elf.sections:
            if s.type != kind or s.size == 0 or s.link >= len(elf.sections):
                continue
            strtab = elf.sections[s.link]
            strings = elf.read(strtab.offset, strtab.size)
            syms = np.frombuffer(elf.read(s.offset, s.size - s.size % _SYM.itemsize), dtype=_SYM)
            for name in names:
                if name in found:
                    continue
                pos = strings.find(b"\0" + name + b"\0")
                if pos < 0:
                    continue
                hit = syms[(syms["name"] == pos + 1) & (syms["value"] != 0)]
                if len(hit):
                    found[name] = (int(hit[0]["value"]), int(hit[0]["size"]))
    return found


def inspect_binary(path: str, name_hint: str = "") -> PythonBinary | None:
    """The interpreter facts of one ELF file, or None if it does not define `_PyRuntime`."""
    try:
        with ElfFile(path) as elf:
            spans = _symbol_spans(elf, _WANTED + (_EVAL_LOOP,))
            syms = {name: value for name, (value, _size) in spans.items()}
            runtime = syms.get(b"_PyRuntime")
            if runtime is None or b"_Py_NoneStruct" not in syms:
                return None
            offsets = None
            off = elf.vaddr_to_file_offset(runtime)
            if off is not None and off + DEBUG_SIZE <= elf.size and elf.read(off, 8) == DEBUG_COOKIE:
                offsets = from_debug_offsets(elf.read(off, DEBUG_SIZE))
            version = offsets.version if offsets else None
            if version is None and b"Py_Version" in syms:
                voff = elf.vaddr_to_file_offset(syms[b"Py_Version"])
                if voff is not None:
                    hexversion = struct.unpack("<I", elf.read(voff, 4))[0]
                    version = (hexversion >> 24, (hexversion >> 16) & 0xFF)
            if version is None:
                m = _NAME.search(name_hint or path)
                if not m:
                    return None
                version = (int(m.group(1)), int(m.group(2)))
            offsets = offsets or table_offsets(version)
            if offsets is None or not offsets.fits_walker:
                return None     # a layout the BPF walker cannot read: no Python frames, never wrong ones
            return PythonBinary(path, version, offsets, runtime, syms[b"_Py_NoneStruct"], spans.get(_EVAL_LOOP, (0, 0)))
    except (ElfError, OSError, ValueError, struct.error):
        return None


def _candidates(mappings: list[Mapping]) -> list[Mapping]:
    """The first mapping of each file that looks like a CPython interpreter, libpython first. Only
    files the process runs (mapped executable): a profiler or a debugger also maps interpreters it
    only reads (hotstack maps every binary it symbolizes)."""
    running = {m.file_path for m in mappings if m.executable and m.is_file}
    seen: dict[str, Mapping] = {}
    for m in mappings:
        if m.is_file and m.file_path in running and _NAME.search(m.file_path) and m.file_path not in seen:
            seen[m.file_path] = m
    return sorted(seen.values(), key=lambda m: "libpython" not in m.file_path)


def _load_base(elf_path: str, mappings: list[Mapping]) -> int | None:
    """Where the process loaded the file (address - ELF virtual address), from its mappings of that
    file: executable ones first, since another mapping of the same file may be a copy the process
    only reads (at any address: a profiler's mmap of the whole file gave a wrong base)."""
    try:
        with ElfFile(elf_path) as elf:
            for m in sorted(mappings, key=lambda m: not m.executable):
                vaddr = elf.file_offset_to_vaddr(m.offset)
                if vaddr is not None:
                    return m.start - vaddr
    except ElfError:
        return None
    return None


def find_interpreter(mem: ProcessMemory, runtime: int, o: PyOffsets) -> tuple[int, int] | None:
    """(interp, address of interp->threads.head), checked through the back pointer tstate->interp.

    The table's interpreters_head can drift between patch releases; when the check fails, nearby
    slots of _PyRuntime are tried (the interpreter is the one its threads point back to).
    """
    def check(head_off: int) -> tuple[int, int] | None:
        try:
            interp = mem.u64(runtime + head_off)
            if interp == 0 or interp & 7:
                return None
            tstate = mem.u64(interp + o.threads_head)
            if tstate == 0 or tstate & 7 or mem.u64(tstate + o.tstate_interp) != interp:
                return None
            return interp, interp + o.threads_head
        except MemoryReadError:
            return None

    found = check(o.interpreters_head)
    if found:
        return found
    for delta in range(8, 257, 8):
        for head_off in (o.interpreters_head - delta, o.interpreters_head + delta):
            if head_off >= 0 and (found := check(head_off)):
                return found
    return None


_binaries: dict[tuple, PythonBinary | None] = {}


def inspected_once(cache: dict, path: str, inspect):
    """`inspect()` of the file at `path`, run once per file (keyed by device, inode, size and mtime,
    so a replaced file is inspected again); None if the file is gone or not the runtime's. Shared
    by the interpreter sources' detection (CPython, Ruby, PHP)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in cache:
        cache[key] = inspect()
    return cache[key]


def detect(pid: int) -> PythonProcess | None:
    """The CPython interpreter running in `pid`, or None (not Python, not initialized yet, or gone)."""
    # cheap test first: most processes of a host are not Python (the pid watcher's read of this
    # round; the whole text is read only for a process that maps a file so named)
    if "python" not in procs.exec_paths(pid, recent=True):
        return None
    text = procs.read_maps_text(pid, recent=True)
    mappings = parse_maps(text)
    root = procs.root_path(pid)
    for cand in _candidates(mappings):
        path = root + cand.file_path
        binary = inspected_once(_binaries, path, lambda: inspect_binary(path, cand.file_path))
        if binary is None:
            continue
        base = _load_base(path, [m for m in mappings if m.file_path == cand.file_path])
        if base is None:
            continue
        mem = ProcessMemory(pid)
        found = find_interpreter(mem, base + binary.runtime, binary.offsets)
        if found is None:
            return None
        return PythonProcess(pid, binary, base, base + binary.runtime, base + binary.none, *found)
    return None
