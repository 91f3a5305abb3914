"""The entries of the symbolizer's two caches: what is known of one mapped file (ModuleSymbols,
elf_cache) and of one process (ProcessSymbols, pid_cache), with the frames named from them.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field

from ..profile.model import Frame, FrameKind
from .elf import ElfFile
from .gopclntab import GoPclntab
from .perfmap import PerfMap
from .symtab import SymbolTable

MAX_RESULT_CACHE = 65536       # resolved addresses remembered per file (profiles repeat them)
RESULT_BYTES = 160             # what one remembered address costs, for the byte budget
FRAME_BYTES = 200              # a remembered Frame and its dict slot
_MISSING = object()


@dataclass
class ModuleSymbols:
    """What we know of one mapped file (an elf_cache entry)."""

    path: str
    elf: ElfFile | None
    table: SymbolTable | None
    build_id: str
    error: str = ""
    go: GoPclntab | None = None
    debug_file: str = ""
    sources: tuple[str, ...] = ()
    checked_at: float = 0.0      # when the files were last seen intact (see ElfFile.intact)
    refused: list[str] = field(default_factory=list)
    key: tuple = ()
    _results: dict[int, tuple | None] = field(default_factory=dict)
    _accounted: int = 0            # len(_results) when the cache last weighed this entry
    _debug: ElfFile | None = None
    # whether a lookup may have read the files' pages since release_pages: a host's symbolizer holds
    # tens to hundreds of files, of which an interval's new addresses touch a few
    touched: bool = True

    @property
    def nbytes(self) -> int:
        n = 512 + RESULT_BYTES * len(self._results)
        if self.table is not None:
            n += self.table.nbytes
        if self.go is not None:
            n += self.go.nbytes
        return n

    @property
    def symbols(self) -> int:
        return (len(self.table) if self.table is not None else 0) + (len(self.go) if self.go is not None else 0)

    def intact(self, now: float) -> bool:
        """Files still safe to read (checked at most once a second)."""
        if now - self.checked_at < 1.0:
            return True
        self.checked_at = now
        files = [self.elf] + ([self._debug] if self._debug is not None else [])
        return all(f is None or f.intact() for f in files)

    def release_pages(self) -> None:
        if not self.touched:
            return
        self.touched = False
        for elf in (self.elf, self._debug):
            if elf is not None:
                elf.release_pages()

    def lookup_many(self, vaddrs: list[int]) -> list[tuple[str, int, str, int] | None]:
        """(name, offset, file, line) for each address, or None."""
        out: list[tuple[str, int, str, int] | None] = [None] * len(vaddrs)
        todo = list(range(len(vaddrs)))
        if self.go is not None:
            rest = []
            for i, found in zip(todo, self.go.lookup_many(vaddrs)):
                if found is None:
                    rest.append(i)
                else:
                    out[i] = (found[0], found[1], "", 0)
            todo = rest
        if self.table is not None and todo:
            for i, found in zip(todo, self.table.lookup_many([vaddrs[i] for i in todo])):
                if found is not None:
                    out[i] = (found[0], found[1], "", 0)
        return out

    def resolve(self, vaddrs: list[int], demangle) -> list[tuple[str, int, str, int] | None]:
        """lookup_many with shown names (demangled) and file:line, remembered per address."""
        cache = self._results
        out = [cache.get(v, _MISSING) for v in vaddrs]
        missing = [i for i, r in enumerate(out) if r is _MISSING]
        if missing:
            self.touched = True
            for i, found in zip(missing, self.lookup_many([vaddrs[i] for i in missing])):
                if found is not None:
                    if self.go is not None and not found[2]:
                        file, line = self.go.line(vaddrs[i])
                        found = (found[0], found[1], file, line)
                    found = (demangle(found[0]),) + tuple(found[1:])
                out[i] = found
                if len(cache) < MAX_RESULT_CACHE:
                    cache[vaddrs[i]] = found
        return out


@dataclass
class ProcessSymbols:
    """A pid_cache entry: what one process's mappings resolved to."""

    pid: int
    start_time: int
    # the procs.MappingIndex these frames were named with, held: an id() compared instead could be a
    # freed index's, reused by another one (a remapped process's mappings, read again or chosen per
    # stack), whose addresses then got the frames of the other's code
    mappings: object
    modules: dict[tuple, tuple] = field(default_factory=dict)   # mapping -> elf_cache key
    perf_map: PerfMap | None = None
    frames: dict[int, Frame] = field(default_factory=dict)   # address*2 + is_leaf -> file frame
    exe: tuple | None = None       # (dev, inode) of /proc/PID/exe: changes on exec
    exe_checked_at: float = 0.0
    accounted: int = 0

    @property
    def nbytes(self) -> int:
        return (256 + 200 * len(self.modules) + FRAME_BYTES * len(self.frames)
                + (self.perf_map.nbytes if self.perf_map is not None else 0))


def file_identity(st: os.stat_result) -> tuple:
    """A file's identity: which file (device, inode) and which content of it. ctime too: a file
    rewritten in place with its mtime put back is still another file."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_frame(module: ModuleSymbols, path: str, address: int, found: tuple | None) -> Frame:
    """The frame of `address` (an ELF virtual address of the file at `path`) from what the
    module's lookup found there: its function, or `file+0xADDRESS` without a symbol."""
    if found is None:
        return Frame(f"{posixpath.basename(path)}+0x{address:x}", FrameKind.NATIVE, path, address,
                     module.build_id, resolved=False)
    return Frame(found[0], FrameKind.NATIVE, path, address, module.build_id, found[2], found[3])
