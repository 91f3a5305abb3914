"""Userspace side of the kernel unwinder (bpf/native_unwind.h): tables into BPF maps.

- `configure(spec)`: before loading, the kernel structure offsets (from the kernel's BTF) and
  the feature probe that picks how PCs are mapped to files: where the kernel keeps VMAs in a
  maple tree (6.1+) the program walks it itself on a cache miss; elsewhere userspace fills
  each process's cache (`write_process`) from /proc/PID/maps.
- `NativeTables`: loads FileTables (kernel_tables.py) into the row arena, the rule array and
  the file map; builds the files the kernel queued (`nu_missing`) as it meets them; evicts the
  tables of files no sample has touched for the longest when the arena is full. Every drop is
  counted (`counters()`).

The maps' records (struct nu_file_key, nu_file, nu_rule, nu_range, nu_ranges, nu_missing_value,
nu_remap_value) and the constants both sides use come from bpf/schema.yaml (bpf/schema.py here).
"""

from __future__ import annotations

import functools
import logging
import mmap
import os
import re
import struct
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..bpf import schema
from ..ebpf.btf import kernel_btf
from ..ebpf.errors import SyscallError
from ..ebpf.links import btf_target_id
from ..ebpf.maps import BPF_F_MMAPABLE, possible_cpus
from ..procs import map_file_at, parent_pid, root_path
from ..procs.maps import Mapping, kernel_dev_field, read_maps
from ..symbols.debugfile import find_debug_file
from ..symbols.elf import ElfError, ElfFile
from . import cfi
from .kernel_tables import FileTable, RuleSet, TableCache
from ..symbols.vdso import VDSO_KEY, VDSO_PATH, vdso_fd

log = logging.getLogger("hotstack.unwind")

MAPPED_PROGRAM = "hotstack_mapped"   # bpf/mappings.bpf.c
# 32 MiB of rows: ~120 files the size of libc, hundreds of small ones; one large C++ library
# (libLLVM: 1M rows) took half of the former 16 MiB on a developer host, and evictions churned.
DEFAULT_ROWS = 1 << 22
# One serve builds tables for about this long before it lets cached files and the kernel's new
# requests in again (a first build of a large library takes seconds).
BUILD_BUDGET_S = 0.2
KNOWN_PATHS = 16384              # (ino, dev) -> path entries remembered for files of exited processes

# the nu_stats counters by index: enum nu_stat's names, in lower case without NU_STAT_
STAT_NAMES = tuple(name.removeprefix("NU_STAT_").lower() for name in schema.ENUMS["nu_stat"] if name != "NU_STAT_MAX")
_U32 = struct.Struct("<I")       # the maps keyed by tgid or index


def kernel_dev(st_dev: int) -> int:
    """os.stat's st_dev -> the kernel's internal dev_t (what the program reads from the superblock)."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


@functools.lru_cache(maxsize=1024)     # (a host has a few devices; each new process's mappings name them)
def maps_dev(field: str) -> int:
    """/proc/PID/maps' device field ("fd:01", hex major:minor) -> the kernel's internal dev_t."""
    major, minor = (int(x, 16) for x in field.split(":"))
    return (major << 20) | minor


_U64 = (1 << 64) - 1


def _mix(h: int, word: int) -> int:
    """nu_mix (bpf/native_unwind.h): one word more into a running hash."""
    h = ((h ^ word) * schema.NU_HASH_PRIME) & _U64
    return h ^ (h >> schema.NU_HASH_SHIFT)


# (inode, device) as /proc/PID/maps shows a file on an overlay -> (inode, device) the kernel
# unwinder reads (the layer's file under it), as open_mapped met them
_LAYER_FILES: dict[tuple[int, int], tuple[int, int]] = {}
LAYER_FILES = 4096


def file_stack_hash(mappings, pcs: tuple[int, ...], end: int) -> int | None:
    """The key the kernel gives a stack whose every frame is in a file (nu_hash: by inode, device
    and file offset per frame), with the file of each address taken from `mappings` (a
    procs.MappingIndex); None if an address is in none of its file mappings. Equal to the
    kernel's: the addresses were walked in those files (a file on an overlay by the numbers of
    the layer's file under it, once its table was opened through a mapping)."""
    h = schema.NU_HASH_BASIS
    layers = _LAYER_FILES
    for i, pc in enumerate(pcs):
        m = mappings.find(pc - 1 if i else pc)     # (a return address: its call is before it)
        if m is None or not m.inode:
            return None
        ino, dev = m.inode, maps_dev(m.dev)
        if layers:
            ino, dev = layers.get((ino, dev), (ino, dev))
        h = _mix(_mix(_mix(h, ino), dev), (pc - m.start + m.offset) & _U64)
    h = _mix(_mix(h, len(pcs)), end)
    return h or 1


def has_maple_tree() -> bool:
    try:
        btf = kernel_btf()
        btf.member_offset("mm_struct", "mm_mt")
        btf.member_offset("maple_range_64", "slot")
        return True
    except (KeyError, OSError):
        return False


def has_mm_lock_seq() -> bool:
    """Whether the kernel stamps every change of an address space (mm_struct.mm_lock_seq, 6.4+);
    before it the unwinder's mapping cache needs a count of the mappings made (configure_mapped)."""
    try:
        kernel_btf().member_offset("mm_struct", "mm_lock_seq")
        return True
    except (KeyError, OSError):
        return False


def configure_mapped(spec) -> None:
    """bpf/mappings.bpf.c's struct offsets (what configure writes for the same names) and its
    tracepoint (KeyError where the kernel has none: from 6.4 on, which have mm_lock_seq)."""
    btf = kernel_btf()
    for name, member in (("nu_off_vma_mm", "vm_mm"), ("nu_off_vma_flags", "vm_flags"),
                         ("nu_off_vma_file", "vm_file")):
        spec.set_constant(name, btf.member_offset("vm_area_struct", member))
    spec.programs[MAPPED_PROGRAM].attach_btf_id = btf_target_id("tp_btf", "vma_store", btf)


def configure(spec, rows: int = DEFAULT_ROWS, kernel_vma_walk: bool | None = None) -> bool:
    """Write the unwinder's .rodata constants and map sizes into `spec`; True if the kernel builds the
    mapping lists itself (else userspace must call write_process for each process)."""
    walk = has_maple_tree() if kernel_vma_walk is None else kernel_vma_walk
    btf = kernel_btf()
    offsets = {
        "nu_off_vma_mm": ("vm_area_struct", "vm_mm"),
        "nu_off_range_pivot": ("maple_range_64", "pivot"),
        "nu_off_range_slot": ("maple_range_64", "slot"),
        "nu_off_arange_slot": ("maple_arange_64", "slot"),
        "nu_off_vma_start": ("vm_area_struct", "vm_start"),
        "nu_off_vma_end": ("vm_area_struct", "vm_end"),
        "nu_off_vma_flags": ("vm_area_struct", "vm_flags"),
        "nu_off_vma_pgoff": ("vm_area_struct", "vm_pgoff"),
        "nu_off_vma_file": ("vm_area_struct", "vm_file"),
        "nu_off_file_inode": ("file", "f_inode"),
        "nu_off_inode_ino": ("inode", "i_ino"),
        "nu_off_inode_sb": ("inode", "i_sb"),
        "nu_off_sb_dev": ("super_block", "s_dev"),
        "nu_off_task_mm": ("task_struct", "mm"),
    }
    for name, (struct_name, member) in offsets.items():
        try:
            spec.set_constant(name, btf.member_offset(struct_name, member))
        except KeyError:
            walk = False
    try:
        spec.set_constant("nu_off_mm_root", btf.member_offset("mm_struct", "mm_mt")
                          + btf.member_offset("maple_tree", "ma_root"))
    except KeyError:
        pass      # no maple tree: the walk is off
    if has_mm_lock_seq():
        spec.set_constant("nu_off_mm_seq", btf.member_offset("mm_struct", "mm_lock_seq"))
    else:   # before 6.4: the mapping cache's stamp is made of the mapping and page counts
        try:
            stamp = {name: btf.member_offset("mm_struct", member) for name, member in
                     (("nu_off_mm_map_count", "map_count"), ("nu_off_mm_total_vm", "total_vm"),
                      ("nu_off_mm_exec_vm", "exec_vm"))}
        except KeyError:
            stamp = {}   # (none of them: a slot lives until exec)
        for name, offset in stamp.items():
            spec.set_constant(name, offset)
    try:   # the vDSO's mapping, whose code has its table under VDSO_KEY (symbols/vdso.py)
        spec.set_constant("nu_off_mm_vdso", btf.member_offset("mm_struct", "context.vdso"))
    except KeyError:
        pass
    try:   # where the kernel has no bpf_task_pt_regs (before 5.15): the top of a task's stack
        spec.set_constant("nu_off_task_stack", btf.member_offset("task_struct", "stack"))
    except KeyError:
        pass
    spec.set_constant("nu_kernel_vma_walk", int(walk))
    spec.maps["nu_rule_cache"].max_entries = schema.NU_RULE_CACHE_SLOTS * possible_cpus()   # each CPU its own slots
    spec.maps["nu_rows"].max_entries = rows
    # rows are written through a shared mapping of the array: a table of 500k rows took ~0.5 s
    # of kernel time as a batch update (the kernel updates element by element), a copy takes ms
    spec.maps["nu_rows"].flags |= BPF_F_MMAPABLE
    return walk


@dataclass
class _Loaded:
    first: int
    count: int
    key: str
    path: str


@dataclass
class _Pending:
    fd: int          # the file, held open
    size: int        # its size: the smallest are built first
    display: str     # its path, as the process maps it
    uncached: bool = False   # its table is in no cache: it waits for a build


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
        self.rows_map = maps["nu_rows"]
        self.rules_map = maps["nu_rules"]
        self.files_map = maps["nu_files"]
        self.procs_map = maps["nu_procs"]
        self.missing_map = maps["nu_missing"]
        self.remap_map = maps.get("nu_remap")
        self._written: dict[int, float] = {}      # pid -> when its mapping list was last written
        self.stats_map = maps["nu_stats"]
        self.capacity = self.rows_map.spec.max_entries
        self._rows_mappable = self._can_map_rows()
        self.cache = cache or TableCache()
        self.rules = RuleSet(self.rules_map.spec.max_entries)
        self.loaded: dict[tuple[int, int], _Loaded] = {}
        self._free: list[tuple[int, int]] = [(0, self.capacity)]     # (first, count), sorted
        self._lock = threading.Lock()
        self.counters = Counters()
        self._last_counters: dict[str, int] = {}
        self._pending: dict[tuple[int, int], _Pending] = {}      # queued files waiting for their table
        self._known_paths: dict[tuple[int, int], str] = {}       # (ino, dev) -> a path that opens it
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
            if count > self.capacity:      # evicting everything would not make room
                self.counters.rows_full += 1
                return False
            first = self._allocate(count)
            if first is None:
                self._evict_for(count)
                first = self._allocate(count)
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
            self._write_rows(first, index)
            self._write_rows(first + len(index), rows)
            # each load its own serial: the kernel's per-CPU rule cache keys on it, so that no entry
            # of an evicted table can match the table loaded in its place
            self._serial += 1
            value = schema.NU_FILE.pack(first=first + len(index), count=len(rows), index=first, base=base,
                                        pages=len(index), serial=self._serial, last_use=time.monotonic_ns())
            self.files_map.update(_file_key(ino, dev), value)
            self.loaded[(ino, dev)] = _Loaded(first, count, table.key, path)
            self.counters.files_loaded += 1
            return True

    def _can_map_rows(self) -> bool:
        if not self.rows_map.spec.flags & BPF_F_MMAPABLE:
            return False
        try:
            self.rows_map.mmap(0, mmap.PAGESIZE).close()
            return True
        except (SyscallError, ValueError):
            return False

    def _write_rows(self, first: int, rows: np.ndarray) -> None:
        """rows into nu_rows[first:]: through a mapping of just their pages where the map allows it
        (mapped for the copy only: the kernel maps every page of a mapping at once, and pages kept
        mapped would count in our RSS), else as a batch update."""
        if not len(rows):
            return
        if not self._rows_mappable:
            keys = np.arange(first, first + len(rows), dtype=np.uint32)
            self.rows_map.update_batch(keys.tobytes(), rows.astype("<u8").tobytes(), len(rows))
            return
        lo = first * 8 // mmap.PAGESIZE * mmap.PAGESIZE
        hi = (first + len(rows)) * 8
        with self.rows_map.mmap(lo, hi - lo) as mem:
            view = np.frombuffer(mem, dtype="<u8")
            view[first - lo // 8:first - lo // 8 + len(rows)] = rows
            del view      # the mapping closes only once no view of it is left

    def _allocate(self, count: int) -> int | None:
        for i, (first, size) in enumerate(self._free):
            if size >= count:
                if size == count:
                    del self._free[i]
                else:
                    self._free[i] = (first + count, size - count)
                return first
        return None

    def _release(self, first: int, count: int) -> None:
        self._free.append((first, count))
        self._free.sort()
        merged: list[tuple[int, int]] = []
        for f, c in self._free:
            if merged and merged[-1][0] + merged[-1][1] == f:
                merged[-1] = (merged[-1][0], merged[-1][1] + c)
            else:
                merged.append((f, c))
        self._free = merged

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
            if any(size >= count for _, size in self._free):
                return
            self.remove(key, locked=True)

    def remove(self, key: tuple[int, int], locked: bool = False) -> None:
        loaded = self.loaded.pop(key, None)
        if loaded is None:
            return
        # the file map entry goes first: no walk starts a search in rows about to be reused
        self.files_map.delete(_file_key(*key))
        self._release(loaded.first, loaded.count)
        self.counters.files_evicted += 1

    # -- what the kernel asked for --------------------------------------------------------------------
    def learn_paths(self, mappings, root: str = "", root_is_host: bool = True) -> None:
        """Remember where the files of a process's executable mappings can be opened (procs.Mapping
        objects), for when the kernel queues one after every process that mapped it has exited
        (a compiler's passes, a loop of short commands): their /proc/PID/map_files are gone then."""
        for m in mappings:
            if not m.inode or not m.path.startswith("/") or m.deleted:
                continue
            try:
                key = (m.inode, maps_dev(m.dev))
            except ValueError:
                continue
            if key in self.loaded:
                continue
            self._known_paths[key] = m.path if root_is_host else f"{root}{m.path}"
        if len(self._known_paths) > KNOWN_PATHS:
            for key in list(self._known_paths)[:len(self._known_paths) // 2]:
                del self._known_paths[key]

    def serve_missing(self, limit: int = 64, build_budget_s: float = BUILD_BUDGET_S) -> bool:
        """Load the tables of files the kernel met without one. Each queued file is opened at once
        (held by descriptor: its process may exit, its file be deleted, before the table exists);
        tables already cached (memory, disk) are loaded first, smallest first, milliseconds each, so
        a file met by a short process never waits behind the first build of a large library; then
        files are built, smallest first, for about `build_budget_s` (at least one). True while some
        wait."""
        self._take_queued(limit)
        for key, pending in sorted(self._pending.items(), key=lambda kv: kv[1].size):
            if pending.uncached:
                continue          # looked up in an earlier serve: it waits for its build
            if self._serve(key, pending, build=False) is not None:
                del self._pending[key]
            else:
                pending.uncached = True
        deadline = time.perf_counter() + build_budget_s
        for key, pending in sorted(self._pending.items(), key=lambda kv: kv[1].size):
            self._serve(key, pending, build=True)
            del self._pending[key]
            if time.perf_counter() >= deadline:
                break
        return bool(self._pending)

    def queued(self, remaps: bool) -> bool:
        """Whether serve_missing (and with `remaps`, serve_remaps) has work: files the kernel queued or
        that wait for a build, processes whose mapping list it found stale. One syscall a map."""
        return bool(self._pending) or self.missing_map.any_key() or (
            remaps and self.remap_map is not None and self.remap_map.any_key())

    def _take_queued(self, limit: int) -> None:
        for raw_key, raw_value in self.missing_map.items():
            file, missing = schema.NU_FILE_KEY.unpack(raw_key), schema.NU_MISSING_VALUE.unpack(raw_value)
            pid, start, end = missing.pid, missing.start, missing.end
            self.missing_map.delete(raw_key)
            key = (file.ino, file.dev)
            if key in self.loaded or key in self._pending:
                continue
            if len(self._pending) >= limit:
                self.counters.files_deferred += 1    # queued again by the next sample that needs it
                continue
            pending = self._open(pid, start, end, key)
            if pending is None:
                self.counters.files_failed += 1
                continue
            self._pending[key] = pending

    def _open(self, pid: int, start: int, end: int, key: tuple[int, int]) -> "_Pending | None":
        """The file behind the kernel's (ino, dev), held open: through the process's mapping while
        it runs and still holds that file (open_mapped), else through a path a process that mapped
        it showed (checked to be that file), else through the process's parent's mapping at the
        same addresses. The last is a shell's child, sampled in the shell's code between its fork
        (which copies the shell's mappings where they are) and its exec (each run of a loop of
        commands): by the time this runs it has exec'd, and the shell, which maps that code, is
        rarely sampled (it waits), so no path of it was known; the file had gone without a table
        until a child was caught before its exec. The vDSO's is this process's image of it."""
        if key == VDSO_KEY:
            fd = vdso_fd()
            return _Pending(fd, os.fstat(fd).st_size, VDSO_PATH) if fd is not None else None
        fd = open_mapped(pid, start, end, key)
        if fd is not None:
            return self._held(fd, pid, start, end, key)
        known = self._known_paths.get(key)     # (the pid watcher's thread adds to it)
        fd = _open_checked(known, key) if known is not None else None
        if fd is not None:
            return _Pending(fd, os.fstat(fd).st_size, known)
        parent = parent_pid(pid)      # (read only if the others fail)
        fd = open_mapped(parent, start, end, key) if parent else None
        return self._held(fd, parent, start, end, key) if fd is not None else None

    def _held(self, fd: int, pid: int, start: int, end: int, key: tuple[int, int]) -> "_Pending":
        """A file opened through pid's mapping at [start, end), shown by the path pid maps it by. A
        file on an overlay (the descriptor's numbers not the kernel's) is remembered by that path
        under pid's root: the host's paths do not reach it, and a process of it gone before naming
        is named with the mappings the kernel kept, by a path that opens the file (path_of)."""
        mapped = _mapped_path(pid, start)
        st = os.fstat(fd)
        if mapped and mapped.startswith("/") and (st.st_ino, kernel_dev(st.st_dev)) != key:
            self._known_paths[key] = root_path(pid) + mapped
        display = mapped or self._known_paths.get(key) or map_file_at(pid, start, end)
        return _Pending(fd, st.st_size, display)

    def _serve(self, key: tuple[int, int], pending: "_Pending", build: bool) -> bool | None:
        """Load one waiting file's table (None: not cached and not `build`); its descriptor is
        closed once it is served either way."""
        loaded = self.add_path(f"/proc/self/fd/{pending.fd}", key[0], key[1], pending.display, build=build)
        if loaded is not None:
            os.close(pending.fd)
        return loaded

    def close(self) -> None:
        """Let go of the files still waiting for a table."""
        for pending in self._pending.values():
            os.close(pending.fd)
        self._pending.clear()

    def preload_process(self, pid: int, only: re.Pattern | None = None) -> int:
        """Load the tables of every executable file mapping of `pid` (e.g. a process found at start),
        or of those whose file name `only` matches."""
        done = 0
        for start, end, _off, ino, dev, path in _exec_mappings(pid):
            if not ino or (only is not None and not only.match(os.path.basename(path))):
                continue
            if (ino, dev) in self.loaded:
                done += 1
                continue
            fd = open_mapped(pid, start, end, (ino, dev))
            if fd is None:
                continue
            try:
                if self.add_path(f"/proc/self/fd/{fd}", ino, dev, path):
                    done += 1
            finally:
                os.close(fd)
        return done

    def preload_shared(self) -> int:
        """Load the tables of the dynamic loader and the C library this process maps: the host's,
        which nearly every process of the host maps. The loader runs only in a process's first
        milliseconds, so the kernel met it late (13 s into a loop of short commands, sampled at
        99 Hz), and until then each new process's samples in it had ended short."""
        done = self.preload_process(os.getpid(), only=SHARED_FILES)
        return done + bool(self.preload_vdso())

    def preload_vdso(self) -> bool:
        """Load the vDSO's table (every process maps it: Go reads its clock through it)."""
        pending = self._open(0, 0, 0, VDSO_KEY)
        return bool(pending is not None and self._serve(VDSO_KEY, pending, build=True))

    def write_process(self, pid: int) -> bool:
        """The userspace path (kernels without a VMA tree to walk): pid's executable mappings, sorted
        by start, for the program's binary search. A process with more than NU_CACHE_SLOTS of them
        keeps the largest; PCs in the others end the walk, counted as no mapping."""
        ranges = _exec_mappings(pid)
        if not ranges:
            return False
        kept = sorted(sorted(ranges, key=lambda r: r[1] - r[0], reverse=True)[:schema.NU_CACHE_SLOTS])
        body = bytearray(schema.NU_RANGES.size)
        body[:schema.NU_RANGES_TAIL_OFFSET] = schema.NU_RANGES.pack(count=len(kept))
        for i, (start, end, offset, ino, dev, path) in enumerate(kept):
            if not ino and path == VDSO_PATH:
                ino, dev = VDSO_KEY
            # pc + to_offset wraps in 64 bits in the kernel: store the difference the same way
            to_offset = (offset - start + (1 << 63)) % (1 << 64) - (1 << 63)
            schema.NU_RANGE.struct.pack_into(body, _range_offset(i), start, end, to_offset, ino, dev, 0)
        self.procs_map.update(_U32.pack(pid), bytes(body))
        self._written[pid] = time.monotonic()
        return True

    def take_remapped(self) -> list[tuple[int, int, int]]:
        """Kernels that walk the VMA tree: (pid, start, end) of the processes the program found with
        another file (or offset) in [start, end) than a mapping it had cached there, since the last
        call (struct nu_remap_value)."""
        if self.remap_map is None or not self.remap_map.any_key():
            return []
        return [(_U32.unpack(key)[0], *schema.NU_REMAP_VALUE.unpack(value)) for key, value in self.remap_map.drain()]

    def serve_remaps(self, min_interval: float = 1.0) -> int:
        """The userspace path: write again the mapping lists of processes the program met a PC
        outside of (a library loaded since, a new process), at most once per `min_interval`."""
        if self.remap_map is None:
            return 0
        done, now = 0, time.monotonic()
        for raw_key, _ in self.remap_map.items():
            self.remap_map.delete(raw_key)
            (pid,) = _U32.unpack(raw_key)
            if now - self._written.get(pid, -min_interval) >= min_interval and self.write_process(pid):
                done += 1
        if len(self._written) > 4 * 1024:       # forget processes written long ago
            self._written = {p: t for p, t in self._written.items() if now - t < 60}
        return done

    # -- processes that exited before their maps were read ---------------------------------------
    def exited_mappings(self, pid: int) -> list:
        """The executable file mappings the kernel unwinder used for `pid` (its per-process cache:
        start, end, file offset, inode, device), as procs.Mapping objects with a path checked to
        open that very file; for a process that exited before userspace read its maps (a short
        command on a loaded host), whose frames are otherwise unnamed. Empty if none is known."""
        raw = self.procs_map.lookup(_U32.pack(pid))
        if raw is None:
            return []
        found = {}
        for i in range(schema.NU_CACHE_SLOTS):
            start, end, to_offset, ino, dev, _ = schema.NU_RANGE.unpack(raw, _range_offset(i))
            if end <= start or not ino or start in found:
                continue
            path = self.path_of(ino, dev)
            if path is not None:
                offset = (start + to_offset) % (1 << 64)
                found[start] = Mapping(start, end, offset, "r-xp", kernel_dev_field(dev), ino, path)
        return [found[start] for start in sorted(found)]

    def path_of(self, ino: int, dev: int) -> str | None:
        """A host path that opens the file the kernel knows as (ino, dev) now, or None."""
        loaded = self.loaded.get((ino, dev))
        for path in (loaded.path if loaded else None, self._known_paths.get((ino, dev))):
            # (a path under a live process's root, a container's, stays; a descriptor's does not)
            if not path or not path.startswith("/") or (path.startswith("/proc/") and not _UNDER_ROOT.match(path)):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if _is_file(st, (ino, dev)):
                return path
        return None

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
        for m in (self.rows_map, self.rules_map, self.files_map, self.procs_map, self.missing_map):
            sizes[m.name] = m.spec.max_entries * (m.spec.value_size + (m.spec.key_size if m.spec.type != 2 else 0))
        return sizes


def _file_key(ino: int, dev: int) -> bytes:
    """A key of nu_files and nu_missing (struct nu_file_key)."""
    return schema.NU_FILE_KEY.pack(ino=ino, dev=dev)


def _range_offset(slot: int) -> int:
    """Where struct nu_ranges holds its `slot`th struct nu_range."""
    return schema.NU_RANGES_TAIL_OFFSET + slot * schema.NU_RANGE.size


def _exec_mappings(pid: int) -> list[tuple[int, int, int, int, int, str]]:
    """(start, end, file offset, inode, kernel dev, path) of pid's executable mappings, by address."""
    return [(m.start, m.end, m.offset, m.inode, maps_dev(m.dev) if m.inode else 0, m.path)
            for m in read_maps(pid)]


def _debug_file_for_tables(elf: ElfFile, path: str) -> ElfFile | None:
    """A file built without unwind tables (-fno-asynchronous-unwind-tables: its .eh_frame holds
    only the C runtime's few FDEs) may have its CFI in the .debug_frame of a separate debug file
    (build id, debuglink), found by its path on the host."""
    if not path.startswith("/") or path.startswith("/proc/") or _eh_frame_fdes(elf, limit=8) >= 8:
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


def open_mapped(pid: int, start: int, end: int, key: tuple[int, int]) -> int | None:
    """A descriptor of the file `pid` maps at [start, end) if that is key's file (the kernel's inode
    and device), else None. /proc/PID/map_files opens whatever is mapped there now: a library
    unloaded and another of the same size loaded at its addresses since the kernel met key's (a
    plugin host) is another file, and its table loaded under key would unwind key's code with the
    other file's rules, every stack of it wrong (a test's plugin host had half its samples end
    after one bogus frame). The descriptor's own numbers decide where they are the kernel's. A file
    on an overlay shows the overlay's device (the kernel unwinder reads the layer's, under it) and,
    with layers on several filesystems, the layer's inode number in its low bits: there the
    process's maps, read after the open, must show key's inode at those addresses (a swap and a
    swap back within that read would pass, microseconds); the numbers they show are kept as
    that file's for file_stack_hash."""
    try:
        fd = os.open(map_file_at(pid, start, end), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if (st.st_ino, kernel_dev(st.st_dev)) == key:
        return fd
    for s, e, _off, ino, dev, _path in _exec_mappings(pid):
        if (s, e) == (start, end) and ino & _LOW_32 == key[0] & _LOW_32:
            if len(_LAYER_FILES) >= LAYER_FILES:
                _LAYER_FILES.clear()
            _LAYER_FILES[(ino, dev)] = key     # (what names stacks walked in it: file_stack_hash)
            return fd
    os.close(fd)
    return None


_LOW_32 = (1 << 32) - 1
_UNDER_ROOT = re.compile(r"/proc/\d+/root/")


def _open_checked(path: str, key: tuple[int, int]) -> int | None:
    """A descriptor of the file at `path` if it is key's very file, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    if _is_file(os.fstat(fd), key):
        return fd
    os.close(fd)
    return None


def _is_file(st: os.stat_result, key: tuple[int, int]) -> bool:
    """Whether a stat is of key's file: its numbers, or those an overlay shows for it (open_mapped)."""
    shown = (st.st_ino, kernel_dev(st.st_dev))
    return shown == key or _LAYER_FILES.get(shown) == key


def _mapped_path(pid: int, start: int) -> str | None:
    for s, _e, _o, _i, _d, path in _exec_mappings(pid):
        if s == start:
            return path
    return None
