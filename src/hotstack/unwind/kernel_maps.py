"""Userspace side of the kernel unwinder (bpf/native_unwind.h): file tables into its BPF maps.

`NativeTables` loads FileTables (kernel_tables.py) into the row arena (row_arena.py), the rule
array and the file map; builds the files the kernel queued (nu_missing, queued_files.py) as it
meets them; evicts the tables of files no sample has touched for the longest when the arena is
full. Every drop is counted (`counters`). Each process's mapping list (nu_procs) is
process_mappings.py's; the load-time settings are kernel_config.py's.

The maps' records and the constants both sides use come from bpf/schema.yaml.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..bpf import schema
from ..procs import Process, as_process
from ..procs.system import descriptor_path, is_proc_path
from ..symbols.debugfile import find_debug_file
from ..symbols.elf import ElfError, ElfFile
from ..symbols.vdso import VDSO_KEY
from . import cfi
from .kernel_files import exec_mappings, host_path, open_mapped
from .kernel_tables import FileTable, RuleSet
from .table_cache import TableCache
from .process_mappings import ProcessMappings
from .queued_files import QueuedFiles
from .row_arena import RowArena

log = logging.getLogger("hotstack.unwind")

# One serve builds tables for about this long before it lets cached files and the kernel's new
# requests in again (a first build of a large library takes seconds).
BUILD_BUDGET_S = 0.2
# the nu_stats counters by index: enum nu_stat's names, in lower case without NU_STAT_
STAT_NAMES = tuple(name.removeprefix("NU_STAT_").lower() for name in schema.ENUMS["nu_stat"] if name != "NU_STAT_MAX")
_U32 = struct.Struct("<I")       # nu_rules is indexed by a u32


@dataclass
class _Loaded:
    first: int
    count: int
    key: str
    path: str


@dataclass
class Counters:
    files_loaded: int = 0
    files_evicted: int = 0
    files_failed: int = 0          # queued files we could not open or parse
    files_deferred: int = 0        # queued while `limit` files already waited (queued again later)
    rows_full: int = 0             # tables that found no room even after eviction
    rules_full: int = 0
    build_seconds: float = 0.0
    kernel: dict = field(default_factory=dict)


# File names of the dynamic loader and the C library (glibc's, musl's, whose loader it is).
SHARED_FILES = re.compile(r"(ld-linux[\w.-]*\.so(\.\d+)*|ld-musl-[\w.-]*\.so(\.\d+)*|ld-[\d.]+\.so"
                          r"|libc\.so(\.\d+)*|libc-[\d.]+\.so)$")


class NativeTables:
    """The kernel unwinder's tables for one loaded collection (maps named nu_*)."""

    def __init__(self, maps: dict, cache: TableCache | None = None) -> None:
        self.rules_map = maps["nu_rules"]
        self.files_map = maps["nu_files"]
        self.stats_map = maps["nu_stats"]
        self.arena = RowArena(maps["nu_rows"])
        self.processes = ProcessMappings(maps["nu_procs"], maps.get("nu_remap"))
        self.cache = cache or TableCache()
        self.rules = RuleSet(self.rules_map.spec.max_entries)
        self.loaded: dict[tuple[int, int], _Loaded] = {}
        self.queue = QueuedFiles(maps["nu_missing"], self.loaded)
        self._lock = threading.Lock()
        self.counters = Counters()
        self._last_counters: dict[str, int] = {}
        self._serial = 0                                          # the last table load's (nu_file.serial)

    # -- files ---------------------------------------------------------------------------------------
    @property
    def rows_used(self) -> int:
        return sum(v.count for v in self.loaded.values())

    def add_path(self, path: str, ino: int, dev: int, display: str | None = None, build: bool = True) -> bool | None:
        """Load the table of the file at `path` under (ino, dev): from the cache, or built when
        `build` (else None when it is not cached). False if the file cannot be read as ELF."""
        if (ino, dev) in self.loaded:
            return True
        try:
            elf = ElfFile(path)
        except ElfError:
            self.counters.files_failed += 1
            return False
        debug = None
        try:
            debug = _debug_file_for_tables(elf, display or path)
            start = time.perf_counter()
            built = self.cache.built
            table = self.cache.get(elf, debug) if build else self.cache.cached(elf, debug)
            seconds = time.perf_counter() - start
            self.counters.build_seconds += seconds
            if self.cache.built != built:
                log.debug("unwind table of %s built: %d rows from %s, %.3f s", display or path, len(table),
                          table.source, seconds)
            elif table is not None:
                log.debug("unwind table of %s read from the cache: %d rows", display or path, len(table))
        except (ElfError, ValueError, IndexError, OverflowError):
            self.counters.files_failed += 1
            return False
        finally:
            elf.close()
            if debug is not None:
                debug.close()
        if table is None:
            return None
        return self.add_table(ino, dev, table, display or path)

    def add_table(self, ino: int, dev: int, table: FileTable, path: str = "") -> bool:
        with self._lock:
            if (ino, dev) in self.loaded:
                return True
            base, index = table.page_index()
            count = max(len(table), 1) + len(index)
            if count > self.arena.capacity:      # evicting everything would not make room
                self.counters.rows_full += 1
                return False
            first = self.arena.allocate(count)
            if first is None:
                self._evict_for(count)
                first = self.arena.allocate(count)
            if first is None:
                self.counters.rows_full += 1
                return False
            ids, new_rules = self.rules.ids_for(table.rules)
            self.counters.rules_full = self.rules.dropped
            for gid, raw in new_rules:
                self.rules_map.update(_U32.pack(gid), raw)
            rows = table.rows_u64(ids) if len(table) else np.zeros(1, np.uint64)
            # (an empty table gets one invalid row, so that the file is known: frame pointers)
            # the page index, then the rows after it: two writes, no joined copy of the rows
            self.arena.write(first, index)
            self.arena.write(first + len(index), rows)
            # each load its own serial: the kernel's per-CPU rule cache keys on it, so that no entry
            # of an evicted table can match the table loaded in its place
            self._serial += 1
            value = schema.NU_FILE.pack(first=first + len(index), count=len(rows), index=first, base=base,
                                        pages=len(index), serial=self._serial, last_use=time.monotonic_ns())
            self.files_map.update(_file_key(ino, dev), value)
            self.loaded[(ino, dev)] = _Loaded(first, count, table.key, path)
            self.counters.files_loaded += 1
            return True

    def _evict_for(self, count: int) -> None:
        """Drop the tables whose files were used least recently (the kernel stamps last_use) until
        `count` contiguous rows are free or nothing is left to drop."""
        ages = []
        for key, loaded in self.loaded.items():
            raw = self.files_map.lookup(_file_key(*key))
            last_use = schema.NU_FILE.unpack(raw).last_use if raw else 0
            ages.append((last_use, key))
        ages.sort()
        for _, key in ages:
            if self.arena.has_room(count):
                return
            self.remove(key, locked=True)

    def remove(self, key: tuple[int, int], locked: bool = False) -> None:
        loaded = self.loaded.pop(key, None)
        if loaded is None:
            return
        # the file map entry goes first: no walk starts a search in rows about to be reused
        self.files_map.delete(_file_key(*key))
        self.arena.release(loaded.first, loaded.count)
        self.counters.files_evicted += 1

    # -- what the kernel asked for --------------------------------------------------------------------
    def learn_paths(self, mappings, root: str = "", root_is_host: bool = True) -> None:
        """QueuedFiles.learn_paths: where the files of a process's executable mappings can be opened."""
        self.queue.learn_paths(mappings, root, root_is_host)

    def serve_missing(self, limit: int = 64, build_budget_s: float = BUILD_BUDGET_S) -> bool:
        """Load the tables of files the kernel met without one. Each queued file is opened at once;
        tables already cached (memory, disk) are loaded first, smallest first, milliseconds each, so
        a file met by a short process never waits behind the first build of a large library; then
        files are built, smallest first, for about `build_budget_s` (at least one). True while some
        wait."""
        deferred, failed = self.queue.take(limit)
        self.counters.files_deferred += deferred
        self.counters.files_failed += failed
        held = self.queue.held
        for key, waiting in sorted(held.items(), key=lambda kv: kv[1].size):
            if waiting.uncached:
                continue          # looked up in an earlier serve: it waits for its build
            if self._serve(key, waiting, build=False) is not None:
                del held[key]
            else:
                waiting.uncached = True
        deadline = time.perf_counter() + build_budget_s
        for key, waiting in sorted(held.items(), key=lambda kv: kv[1].size):
            self._serve(key, waiting, build=True)
            del held[key]
            if time.perf_counter() >= deadline:
                break
        return bool(held)

    def queued(self, remaps: bool) -> bool:
        """Whether serve_missing (and with `remaps`, serve_remaps) has work: files the kernel queued or
        that wait for a build, processes whose mapping list it found stale. One syscall a map."""
        remap_map = self.processes.remap_map
        return bool(self.queue.held) or self.queue.missing_map.any_key() or (
            remaps and remap_map is not None and remap_map.any_key())

    def _serve(self, key: tuple[int, int], held, build: bool) -> bool | None:
        """Load one waiting file's table (None: not cached and not `build`); its descriptor is
        closed once it is served either way."""
        loaded = self.add_path(descriptor_path(held.fd), key[0], key[1], held.display, build=build)
        if loaded is not None:
            os.close(held.fd)
        return loaded

    def close(self) -> None:
        """Let go of the files still waiting for a table."""
        self.queue.close()

    def preload_process(self, process: Process | int, only: re.Pattern | None = None) -> int:
        """Load the tables of every executable file mapping of `process` (a Process, or a live one's
        pid: e.g. a process found at start), or of those whose file name `only` matches."""
        process = as_process(process)
        done = 0
        for start, end, _off, ino, dev, path in exec_mappings(process):
            if not ino or (only is not None and not only.match(os.path.basename(path))):
                continue
            if (ino, dev) in self.loaded:
                done += 1
                continue
            fd = open_mapped(process, start, end, (ino, dev))
            if fd is None:
                continue
            try:
                if self.add_path(descriptor_path(fd), ino, dev, path):
                    done += 1
            finally:
                os.close(fd)
        return done

    def preload_shared(self) -> int:
        """Load the tables of the dynamic loader and the C library this process maps: the host's,
        which nearly every process of the host maps. The loader runs only in a process's first
        milliseconds, so the kernel meets it late (seconds into a loop of short commands), and
        until its table is loaded each new process's samples in it end short."""
        done = self.preload_process(os.getpid(), only=SHARED_FILES)
        return done + bool(self.preload_vdso())

    def preload_vdso(self) -> bool:
        """Load the vDSO's table (every process maps it: Go reads its clock through it)."""
        held = self.queue.open(0, 0, 0, VDSO_KEY)
        return bool(held is not None and self._serve(VDSO_KEY, held, build=True))

    # -- each process's mappings (process_mappings.py) -------------------------------------------------
    def write_process(self, pid: int) -> bool:
        """ProcessMappings.write: pid's mapping list, for kernels without a VMA tree to walk."""
        return self.processes.write(pid)

    def take_remapped(self) -> list[tuple[int, int, int]]:
        """ProcessMappings.take_remapped: (pid, start, end) of mappings the program found changed."""
        return self.processes.take_remapped()

    def serve_remaps(self, min_interval: float = 1.0) -> int:
        """ProcessMappings.serve_remaps: the stale mapping lists written again."""
        return self.processes.serve_remaps(min_interval)

    def exited_mappings(self, pid: int) -> list:
        """ProcessMappings.exited_mappings: the file mappings the kernel kept for `pid`, with paths
        that open those very files."""
        return self.processes.exited_mappings(pid, self.path_of)

    def path_of(self, ino: int, dev: int) -> str | None:
        """A host path that opens the file the kernel knows as (ino, dev) now, or None."""
        loaded = self.loaded.get((ino, dev))
        return host_path((loaded.path if loaded else None, self.queue.known_paths.get((ino, dev))), (ino, dev))

    def kernel_counters(self) -> dict[str, int]:
        sums = self.stats_map.percpu_u64_sums()
        return {name: sums[i] for i, name in enumerate(STAT_NAMES)}

    def add_stats(self, stats) -> None:
        """Add the kernel unwinder's counters since the last call to a ProfileStats (its native_* fields)."""
        now = self.kernel_counters()
        last, self._last_counters = self._last_counters, now
        d = {k: v - last.get(k, 0) for k, v in now.items()}
        stats.native_incomplete += sum(d[k] for k in ("end_truncated", "end_no_mapping", "end_bad_fp", "end_read",
                                                      "end_invalid"))
        stats.native_no_table += d["no_table"]
        stats.native_fp_frames += d["fp_frames"]

    def memory_bytes(self) -> dict[str, int]:
        """Kernel memory of the unwinder's maps (value bytes as allocated, not counting hash overhead)."""
        sizes = {}
        for m in (self.arena.map, self.rules_map, self.files_map, self.processes.procs_map, self.queue.missing_map):
            sizes[m.name] = m.spec.max_entries * (m.spec.value_size + (m.spec.key_size if m.spec.type != 2 else 0))
        return sizes


def _file_key(ino: int, dev: int) -> bytes:
    """A key of nu_files and nu_missing (struct nu_file_key)."""
    return schema.NU_FILE_KEY.pack(ino=ino, dev=dev)


def _debug_file_for_tables(elf: ElfFile, path: str) -> ElfFile | None:
    """A file built without unwind tables (-fno-asynchronous-unwind-tables: its .eh_frame holds
    only the C runtime's few FDEs) may have its CFI in the .debug_frame of a separate debug file
    (build id, debuglink), found by its path on the host."""
    if not path.startswith("/") or is_proc_path(path) or _eh_frame_fdes(elf, limit=8) >= 8:
        return None
    try:
        debug, _refused = find_debug_file(elf, path)
    except (ElfError, OSError):
        return None
    return debug


def _eh_frame_fdes(elf: ElfFile, limit: int) -> int:
    """FDEs in the file's .eh_frame, counted up to `limit`."""
    section = elf.section(".eh_frame")
    if section is None or section.type == 8:
        return 0
    count = 0
    for _start, _body, _end, cie_at in cfi.records(elf.read(section.offset, section.size), debug_frame=False):
        count += cie_at is not None
        if count >= limit:
            break
    return count
