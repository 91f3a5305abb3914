"""The files a language runtime lives in, as a process maps them: shared by the interpreters'
detection (CPython, Ruby, PHP, Perl).

A runtime's file (an interpreter executable or its library) is opened through the process's own
mapping (procs.mapped_file_path), not by the path its maps show. A process in a chroot shows
paths from hotstack's root, one in a container paths of its own root, and a file replaced or
deleted on disk since the process started (a package upgrade) is still the one it runs. What a
file tells is read once per file (its device, inode, size and modification time) and cached.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from ... import procs
from ...procs.maps import Mapping, parse_maps
from ...symbols.elf import SHT_DYNSYM, SHT_SYMTAB, ElfError, ElfFile

T = TypeVar("T")
log = logging.getLogger("hotstack.runtimes")

def symbol_spans(elf: ElfFile, names: tuple[bytes, ...], kinds: tuple[int, ...] = (SHT_DYNSYM, SHT_SYMTAB)
                 ) -> dict[bytes, tuple[int, int]]:
    """(value, size) of each of `names` that the file's dynamic (else full) symbol table defines
    (`kinds`: the tables looked in, in that order)."""
    found: dict[bytes, tuple[int, int]] = {}
    for table, strings in elf.symbol_tables(kinds):
        syms = elf.symbol_entries(table)
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


def symbols(elf: ElfFile, names: tuple[bytes, ...]) -> dict[bytes, int]:
    """The value of each of `names` that the file's dynamic (else full) symbol table defines."""
    return {name: value for name, (value, _size) in symbol_spans(elf, names).items()}


class Unreadable(Exception):
    """The file is the runtime's, but this version or build cannot be read: `reason` says why.
    Raised by a runtime's inspection of a file; inspected_once remembers it as the file's answer."""

    def __init__(self, reason: str, version: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.version = version


@dataclass(frozen=True)
class UnreadProcess:
    """A process that runs a runtime hotstack recognizes and cannot read: no runtime frames."""

    pid: int
    runtime: str
    version: str
    file: str
    reason: str
    partial: str = ""      # what is not read of a runtime whose frames are named ("lines"); "": its frames

    def line(self) -> str:
        version = f" {self.version}" if self.version else ""
        if self.partial:
            return (f"pid {self.pid}: {self.runtime}{version} in {self.file!r}: its frames are named without "
                    f"{self.partial} ({self.reason})")
        return (f"pid {self.pid}: {self.runtime}{version} in {self.file!r} is not read ({self.reason}); "
                f"its {self.runtime} frames show as the interpreter's native frames")


class UnreadRuntimes:
    """Every process whose runtime was recognized and could not be read (or was read in part: its
    frames named without some lines): one warning per file and reason (a host runs many processes of
    one binary), each process counted once, and the last ones kept by pid for `hotstack doctor
    --pid` and the agent's debug info."""

    KEEP = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warned: set[tuple] = set()
        self._by_pid: dict[tuple[int, str], UnreadProcess] = {}
        self.counts: dict[str, int] = {}       # runtime -> processes, since the start
        self.partly: dict[str, int] = {}       # runtime -> processes read in part, since the start
        self._new = 0
        self._new_partly = 0

    def note(self, identity: tuple, found: UnreadProcess) -> None:
        with self._lock:
            key = (found.pid, found.runtime)
            if key in self._by_pid:
                return
            if len(self._by_pid) >= self.KEEP:
                self._by_pid.pop(next(iter(self._by_pid)))
            self._by_pid[key] = found
            if found.partial:
                self.partly[found.runtime] = self.partly.get(found.runtime, 0) + 1
                self._new_partly += 1
            else:
                self.counts[found.runtime] = self.counts.get(found.runtime, 0) + 1
                self._new += 1
            first = (identity, found.reason) not in self._warned
            self._warned.add((identity, found.reason))
        if first:
            log.warning("%s", found.line())

    def of(self, pid: int) -> list[UnreadProcess]:
        with self._lock:
            return [u for (p, _r), u in self._by_pid.items() if p == pid]

    def forget(self, pid: int) -> None:
        """`pid` exec'ed: its new image is a new process to read (and to note again if unreadable).
        Exited processes stay, for the agent's debug info, until KEEP newer ones push them out."""
        with self._lock:
            for key in [k for k in self._by_pid if k[0] == pid]:
                del self._by_pid[key]

    def take_new(self) -> tuple[int, int]:
        """(processes noted unread, processes noted read in part) since the last call (for one
        interval's footer)."""
        with self._lock:
            new, self._new, self._new_partly = (self._new, self._new_partly), 0, 0
        return new


UNREAD = UnreadRuntimes()
# the runtimes as UNREAD names them (every one counted from the start, at 0)
RUNTIME_NAMES = ("CPython", "Node.js", "Ruby", "PHP", "Perl", "Java")


def inspected_once(cache: dict, path: str, inspect: Callable[[], T], *, pid: int = 0, runtime: str = "",
                   shown: str = "") -> T | None:
    """`inspect()` of the file at `path`, run once per file (keyed by device, inode, size and mtime,
    so a replaced file is inspected again); None if the file is gone or not the runtime's. A file
    the inspection found to be the runtime's but could not read (Unreadable) is None too, and the
    process `pid` is noted in UNREAD (`shown`: the path its maps show)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in cache:
        try:
            cache[key] = inspect()
        except Unreadable as e:
            cache[key] = e
    found = cache[key]
    if isinstance(found, Unreadable):
        UNREAD.note(key, UnreadProcess(pid, runtime, found.version, shown or path, found.reason))
        return None
    return found


def load_base(elf_path: str, mappings: list[Mapping]) -> int | None:
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


# What a runtime's own executable holds in its dynamic string table, defined or imported: the
# interpreter or its launcher's entry (the python3, ruby, perl, php, node and java programs, copied
# or renamed as they may be). A program that only embeds a runtime library (an editor linking
# libpython or libperl) has none of these: it is recognized by its name alone, as before.
LAUNCHER_MARKS: dict[str, tuple[bytes, ...]] = {
    "python": (b"\0Py_BytesMain\0",), "ruby": (b"\0ruby_run_node\0",), "php": (b"\0executor_globals\0",),
    "perl": (b"\0perl_run\0",), "v8": (b"\0_ZN4node5StartEiPPc\0",), "hotspot": (b"\0JLI_Launch\0",),
}
# What the file the runtime lives in holds (the executable itself, or its library: libpython,
# libruby, libperl, libphp, libnode, libjvm).
RUNTIME_MARKS: dict[str, tuple[bytes, ...]] = {
    "python": (b"\0_PyRuntime\0",), "ruby": (b"\0ruby_version\0",), "php": (b"\0executor_globals\0",),
    "perl": (b"\0PL_version\0",), "v8": (b"\0v8dbg_",), "hotspot": (b"\0gHotSpotVMStructs\0",),
}
_MAX_MARKED = 16384
# (inode, device as maps shows it) -> (runtimes it launches, runtimes it holds): each file read once
_marked: dict[tuple[int, str], tuple[frozenset[str], frozenset[str]]] = {}
_NO_MARKS = (frozenset(), frozenset())


def _marks_of(path: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the runtimes whose launcher marks, the runtimes whose marks) a file's dynamic string table
    holds; none for a file that is not ELF, or gone."""
    try:
        with ElfFile(path) as elf:
            for _table, strings in elf.symbol_tables((SHT_DYNSYM,)):
                return (frozenset(n for n, marks in LAUNCHER_MARKS.items() if any(m in strings for m in marks)),
                            frozenset(n for n, marks in RUNTIME_MARKS.items() if any(m in strings for m in marks)))
    except (ElfError, OSError, ValueError):
        pass
    return _NO_MARKS


def file_marks(process: procs.Process | int, mapping: Mapping) -> tuple[frozenset[str], frozenset[str]]:
    """_marks_of the file `process` maps at `mapping`, read through that mapping once per file (by
    its inode and device)."""
    key = (mapping.inode, mapping.dev)
    marks = _marked.get(key)
    if marks is None:
        path = procs.as_process(process).mapped_file_path(mapping)
        if path is None:
            return _NO_MARKS
        marks = _marks_of(path)
        if len(_marked) >= _MAX_MARKED:
            _marked.clear()
        _marked[key] = marks
    return marks


def launched_runtimes(process: procs.Process | int) -> frozenset[str]:
    """The runtimes whose launcher the process's executable is, by what the file holds (a copy of
    python3 named myapp, a ruby renamed): its executable mapping's marks, read once per file."""
    process = procs.as_process(process)
    exe = process.exe_path(recent=True).removesuffix(" (deleted)")
    for m in process.exec_maps(recent=True):
        if m.is_file and m.file_path == exe:
            return file_marks(process, m)[0]
    return frozenset()


def runs(process: procs.Process | int, runtime: str) -> bool:
    """Whether the process's executable is `runtime`'s launcher (launched_runtimes)."""
    return runtime in launched_runtimes(process)


# a jmp rel32, or a conditional jump rel32 (0f 80-8f), at every byte (a lookahead: matches overlap)
_JUMPS = re.compile(rb"(?=\xe9(....)|\x0f[\x80-\x8f](....))", re.S)


def jump_targets(code: bytes, at: int, conditional: bool = True) -> Iterator[int]:
    """The targets of the x86-64 rel32 jumps (jmp, and jcc where `conditional`) found in `code`
    loaded at `at`, as bytes read: a match may be the middle of another instruction, so callers
    check what a target must be (a function's start, a jump back)."""
    for m in _JUMPS.finditer(code):
        if m.group(1) is not None:
            yield at + m.start() + 5 + struct.unpack("<i", m.group(1))[0]
        elif conditional:
            yield at + m.start() + 6 + struct.unpack("<i", m.group(2))[0]


def runs_named(process: procs.Process | int, runtime: str) -> bool:
    """Whether the process's executable is named for `runtime` (exe_name) or is its launcher (runs()):
    the processes an interpreter's source looks into."""
    return runtime in exe_name(process) or runs(process, runtime)


def exe_name(process: procs.Process | int) -> str:
    """The file name of the process's executable ('' when gone), as the pid watcher read it: an
    interpreter's source looks into a process whose executable is named for it only."""
    return os.path.basename(procs.as_process(process).exe_path(recent=True).removesuffix(" (deleted)"))


def holding(process: procs.Process | int, mappings: list[Mapping]) -> None:
    """Read the marks of the files the process runs (mapped executable) not read yet, so that candidates()
    knows which hold a runtime: for a process whose executable is a runtime's launcher (runs()),
    whose library may be named anything."""
    for m in mappings:
        if m.executable and m.is_file:
            file_marks(process, m)


def candidates(mappings: list[Mapping], name: re.Pattern[str], library_word: str, runtime: str = "") -> list[Mapping]:
    """The first mapping of each file whose name matches `name` or that holds `runtime`'s mark
    (RUNTIME_MARKS, of a file already read: holding()), files whose path holds `library_word` first (an interpreter's shared
    library before the executable that loads it). Only files the process runs (mapped executable):
    a profiler or a debugger also maps interpreters it only reads (hotstack maps every binary it
    symbolizes)."""
    running = {(m.inode, m.dev) for m in mappings if m.executable and m.is_file}
    seen: dict[tuple[int, str], Mapping] = {}
    for m in mappings:
        key = (m.inode, m.dev)
        if m.is_file and key in running and key not in seen and (
                name.search(m.file_path) or (runtime and runtime in _marked.get(key, _NO_MARKS)[1])):
            seen[key] = m
    return sorted(seen.values(), key=lambda m: library_word not in m.file_path)


@dataclass(frozen=True)
class Loaded:
    """An interpreter file a process runs: its first mapping, a path that opens the very file, where
    the process loaded it, and the process's maps it was found in."""

    mapping: Mapping
    path: str
    base: int                   # load bias: address - ELF virtual address
    text: str                   # /proc/PID/maps as read (the pid watcher's read of this round)
    mappings: list[Mapping]

    @property
    def file_name(self) -> str:
        return os.path.basename(self.mapping.file_path)


def interpreter_files(process: procs.Process | int, runtime: str, label: str,
                      named: Callable[[procs.Process], bool], word: str,
                      name: re.Pattern[str], library_word: str, cache: dict,
                      inspect: Callable[[str, str], T]) -> Iterator[tuple[T, Loaded]]:
    """For an interpreter's detect(): (what `inspect(path, shown path)` tells, where it is loaded)
    of each file of the process that may be `runtime`'s interpreter, inspected once per file
    (inspected_once: a file it recognizes and cannot read is noted as `label`'s). Only a process
    that `named` says is the runtime's by its names, and whose maps hold `word`, or whose executable
    is the runtime's launcher by what it holds (runs()), is looked into: this runs for every new
    process of the host."""
    process = procs.as_process(process)
    pid = process.pid
    launcher = runs(process, runtime)        # (its executable renamed or copied)
    if not launcher and not named(process):
        return
    text = process.maps_text(recent=True)
    if not launcher and word not in text:
        return
    mappings = parse_maps(text)

    def loaded(chosen: list[Mapping]) -> Iterator[tuple[T, Loaded]]:
        for cand, path, its_mappings in opened(process, mappings, chosen):
            found = inspected_once(cache, path, lambda: inspect(path, cand.file_path), pid=pid, runtime=label,
                                   shown=cand.file_path)
            if found is None:
                continue
            base = load_base(path, its_mappings)
            if base is not None:
                yield found, Loaded(cand, path, base, text, mappings)

    first = candidates(mappings, name, library_word, runtime)
    found_any = False
    for item in loaded(first):
        found_any = True
        yield item
    # A launcher's runtime is most often in a file named for it, or in the executable itself (whose
    # marks runs() read): every other file it runs is read for marks only when those name none (a
    # renamed library), as reading each of a process's libraries costs a start.
    if launcher and not found_any:
        holding(process, mappings)
        tried = {(m.inode, m.dev) for m in first}
        yield from loaded([m for m in candidates(mappings, name, library_word, runtime)
                           if (m.inode, m.dev) not in tried])


def opened(process: procs.Process | int, mappings: list[Mapping], chosen: list[Mapping]
           ) -> Iterator[tuple[Mapping, str, list[Mapping]]]:
    """(candidate, a path that opens its very file, every mapping of that file) for each of
    `chosen` that can be opened now."""
    process = procs.as_process(process)
    for cand in chosen:
        path = process.mapped_file_path(cand)
        if path is not None:
            yield cand, path, [m for m in mappings if (m.inode, m.dev) == (cand.inode, cand.dev)]


__all__ = ["jump_targets", "Loaded", "interpreter_files", "LAUNCHER_MARKS", "RUNTIME_MARKS", "RUNTIME_NAMES", "UNREAD", "exe_name", "file_marks", "holding",
           "launched_runtimes", "runs", "UnreadProcess", "UnreadRuntimes", "Unreadable", "candidates", "inspected_once", "load_base",
           "opened", "symbol_spans", "symbols"]
