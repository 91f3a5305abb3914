"""TableStore: unwind tables per mapped file, cached per build id.

A file is opened the way the symbolizer opens it: through /proc/PID/map_files
first (works for deleted files and memfd code while the process lives), then
through the process's root, then by path. Tables are kept per build id (or per
file identity when a file has none), so the same libc in a hundred processes or
containers is parsed and stored once. The store is bounded in bytes (LRU).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..procs import Mapping, ProcessInfo
from ..symbols.debugfile import find_debug_file
from ..symbols.elf import ElfError, ElfFile
from .table import Rule, UnwindTable, build_table

DEFAULT_MAX_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class MappedTable:
    """A file's table as one mapping of one process sees it: vaddr = address - bias."""

    table: UnwindTable | None
    bias: int
    path: str


class TableStore:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, cache_dir: str | None = None) -> None:
        self.max_bytes = max_bytes
        self._disk = DiskCache(default_cache_dir() if cache_dir is None else cache_dir)
        self._by_id: OrderedDict[str, UnwindTable] = OrderedDict()
        self._id_of_file: dict[tuple, str] = {}      # (dev, inode, path) -> build id / identity
        self._lock = threading.Lock()
        self.files_parsed = 0
        self.parse_seconds = 0.0

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(t.nbytes for t in self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def mapped(self, info: ProcessInfo, mapping: Mapping) -> MappedTable:
        """The table for an executable file mapping (table None if the file cannot be read)."""
        elf = _open(info, mapping)
        if elf is None:
            return MappedTable(None, 0, mapping.path)
        try:
            bias = _bias(elf, mapping)
            file_key = (mapping.dev, mapping.inode, mapping.file_path)
            table_id = self._id_of_file.get(file_key)
            if table_id is None:
                table_id = elf.build_id() or "file:%d:%d:%d:%d" % elf.identity
                self._id_of_file[file_key] = table_id
            with self._lock:
                table = self._by_id.get(table_id)
                if table is not None:
                    self._by_id.move_to_end(table_id)
            if table is None:
                table = self._disk.load(table_id)
            if table is None:
                start = time.perf_counter()
                table = build_table(elf)
                if table.fdes < 8:
                    table = self._with_debug_file(info, mapping, elf, table)
                self.parse_seconds += time.perf_counter() - start
                self.files_parsed += 1
                self._disk.save(table_id, table)
                with self._lock:
                    self._by_id[table_id] = table
                    self._evict()
            return MappedTable(table, bias, mapping.path)
        finally:
            elf.close()

    @staticmethod
    def _with_debug_file(info: ProcessInfo, mapping: Mapping, elf: ElfFile, table: UnwindTable) -> UnwindTable:
        """Little or no .eh_frame: try the .debug_frame of the separate debug file (build id, debuglink)."""
        root = "" if info.root_is_host else info.root
        try:
            debug, _refused = find_debug_file(elf, mapping.file_path, root)
        except (ElfError, OSError):
            return table
        if debug is None:
            return table
        try:
            better = build_table(elf, debug)
        finally:
            debug.close()
        return better if better.fdes > table.fdes else table

    def _evict(self) -> None:
        total = sum(t.nbytes for t in self._by_id.values())
        while total > self.max_bytes and len(self._by_id) > 1:
            _, old = self._by_id.popitem(last=False)
            total -= old.nbytes


def default_cache_dir() -> str:
    """$HOTSTACK_UNWIND_CACHE ('' disables), else $XDG_CACHE_HOME/hotstack/unwind or ~/.cache/..."""
    explicit = os.environ.get("HOTSTACK_UNWIND_CACHE")
    if explicit is not None:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hotstack", "unwind")


class DiskCache:
    """Parsed tables on disk, one .npz per build id: parsing libpython takes ~0.6 s, loading ~5 ms."""

    VERSION = 2

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, table_id: str) -> str | None:
        if not self.directory or not table_id or not all(c in "0123456789abcdef" for c in table_id):
            return None        # only real build ids: a file identity is not stable across hosts
        return os.path.join(self.directory, f"v{self.VERSION}-{table_id}.npz")

    def load(self, table_id: str) -> UnwindTable | None:
        path = self._path(table_id)
        if path is None or not os.path.exists(path):
            return None
        try:
            with np.load(path) as z:
                rules = [Rule(*map(int, r)) for r in z["rules"]]
                fdes, fp_fdes, go = (int(x) for x in z["meta"])
                table = UnwindTable(z["pcs"], z["rule_ids"], rules, fdes, fp_fdes, str(z["source"]))
                table.go = bool(go)
                return table
        except (OSError, ValueError, KeyError):
            return None

    def save(self, table_id: str, table: UnwindTable) -> None:
        path = self._path(table_id)
        if path is None:
            return
        try:
            os.makedirs(self.directory, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp.npz"
            rules = np.array([(r.kind, r.cfa_offset, r.rbp_offset, r.ra_offset) for r in table.rules],
                             dtype=np.int64).reshape(-1, 4)
            np.savez(tmp, pcs=table.pcs, rule_ids=table.rule_ids, rules=rules,
                     meta=np.array([table.fdes, table.fp_fdes, int(table.go)]), source=np.array(table.source))
            os.replace(tmp, path)
        except OSError:
            pass      # a cache that cannot be written is only slower


def _open(info: ProcessInfo, mapping: Mapping) -> ElfFile | None:
    candidates = [f"/proc/{info.pid}/map_files/{mapping.start:x}-{mapping.end:x}"]
    if not mapping.path.startswith("/memfd:"):
        candidates.append(f"{info.root}{mapping.file_path}" if info.root else mapping.file_path)
        if info.root_is_host:
            candidates.append(mapping.file_path)
    for candidate in candidates:
        try:
            return ElfFile(candidate)
        except ElfError:
            continue
    return None


def _bias(elf: ElfFile, mapping: Mapping) -> int:
    """address - bias = ELF virtual address, for addresses inside `mapping`."""
    for seg in elf.segments:
        if seg.offset <= mapping.offset < seg.offset + max(seg.filesz, 1):
            return mapping.start - mapping.offset + seg.offset - seg.vaddr
    return mapping.start - mapping.offset
