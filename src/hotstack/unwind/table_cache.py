"""TableCache: the kernel unwinder's file tables (kernel_tables.FileTable) already built, in memory
(LRU, bounded in bytes) and on disk, keyed by *content*: the file's size and a hash of every section
the rows came from plus the program headers (kernel_tables.content_key). A copy with the same build
id but other bytes is never served another copy's rows. What is read back is checked against that
key and for sanity (sorted, ids in range) before use.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from collections import OrderedDict

import numpy as np

from .. import cache_files
from ..symbols.elf import ElfFile
from .kernel_tables import MAX_ROWS_PER_FILE, RULE_DTYPE, FileTable, build_file_table, content_key

DEFAULT_MAX_BYTES = 32 << 20


def default_cache_dir() -> str:
    """$HOTSTACK_UNWIND_CACHE ('' disables), else $XDG_CACHE_HOME/hotstack/unwind or ~/.cache/..."""
    return cache_files.directory("unwind", "HOTSTACK_UNWIND_CACHE")


# A table on disk: this header, then the key and the source (UTF-8), zeros to a multiple of 8, the
# offsets (uint32), the rule ids (uint16 or uint32), the rules (RULE_DTYPE). One read and three
# array views. An .npz (a zip of .npy files) costs ~0.7 ms a table, even a small one (its central
# directory, each member's header, CRCs), and the import of zipfile at start ~5 ms; a host's files
# are read back by the dozen when hotstack starts.
_TABLE_HEADER = struct.Struct("<4sIIIIIII")   # magic, version, key bytes, source bytes, rows, id bytes,
_TABLE_MAGIC = b"HSUT"                        # rules, CRC-32 of everything after the header
_MAX_SOURCE_BYTES = 4096                      # the source's name ('.eh_frame+.gopclntab')


class TableCache:
    """FileTables by content key: in memory (LRU, bounded in bytes) and on disk (validated on load)."""

    # 3: Go rows from SP deltas; 4: a STOP row at an entry point without CFI; 5: one flat file
    # (_TABLE_HEADER), not an .npz; 6: Go's vDSO callers by frame pointer, runtime.mstart a STOP;
    # 7: struct nu_rule with a 32-bit CFA offset (12 bytes); 8: its fields reordered; 9: rows worked
    # out from the code that no CFI describes (code_rows.py: musl's libc); 10: only in files most of
    # whose functions no CFI describes (node's builtins keep the frame-pointer walk). The header's
    # version word also holds a hash of the rules' layout (_FORMAT): a table written for another
    # struct nu_rule is never read as this one's
    VERSION = 10

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, directory: str | None = None) -> None:
        self.max_bytes = max_bytes
        self.directory = default_cache_dir() if directory is None else directory
        self._tables: OrderedDict[str, FileTable] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.built = self.loaded = self.rejected = self.evicted = 0
        self._swept = False      # the tables of older versions removed (at this cache's first save)
        self.build_seconds = 0.0

    @property
    def nbytes(self) -> int:
        return self._bytes

    @staticmethod
    def key_of(elf: ElfFile, debug_elf: ElfFile | None = None) -> str:
        # the table of a file with a debug file's .debug_frame differs from the file's alone
        return content_key(elf) if debug_elf is None else f"{content_key(elf)}-{content_key(debug_elf)[-32:]}"

    def cached(self, elf: ElfFile, debug_elf: ElfFile | None = None) -> FileTable | None:
        """The file's table if it is in memory or on disk (milliseconds), else None: never builds."""
        return self._lookup(self.key_of(elf, debug_elf))

    def get(self, elf: ElfFile, debug_elf: ElfFile | None = None) -> FileTable:
        key = self.key_of(elf, debug_elf)
        table = self._lookup(key)
        if table is None:
            start = time.perf_counter()
            table = build_file_table(elf, debug_elf, key)
            self.build_seconds += time.perf_counter() - start
            self.built += 1
            self._save(table)
            self._keep(key, table)
        return table

    def _lookup(self, key: str) -> FileTable | None:
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
                return table
        table = self._load(key)
        if table is not None:
            self._keep(key, table)
        return table

    def _keep(self, key: str, table: FileTable) -> None:
        with self._lock:
            if key not in self._tables:
                self._tables[key] = table
                self._bytes += table.nbytes
                while self._bytes > self.max_bytes and len(self._tables) > 1:
                    _, old = self._tables.popitem(last=False)
                    self._bytes -= old.nbytes
                    self.evicted += 1

    def _path(self, key: str) -> str | None:
        if not self.directory or not all(c in "0123456789abcdef-" for c in key):
            return None
        return os.path.join(self.directory, f"k{self.VERSION}-{key}.table")

    def _load(self, key: str) -> FileTable | None:
        path = self._path(key)
        if path is None:
            return None
        # (the size the header announces is checked before anything more is read: a huge or
        # sparse file is removed unread)
        data = cache_files.read(path, lambda size, header: _table_misfit(size, header, key), _TABLE_HEADER.size,
                                damaged=self._rejected)
        if data is None:
            return None
        table = _parse_table(data, key)
        if table is None:
            self._rejected()
            cache_files.discard(path, "holds no whole table of its file")
            return None
        self.loaded += 1
        return table

    def _rejected(self) -> None:
        self.rejected += 1

    def _sweep_old_versions(self) -> None:
        """Remove the tables an earlier version wrote here: none is read again, and a host's files
        would leave megabytes of them behind at each format change."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in filter(_older_version, names):
            try:
                os.unlink(os.path.join(self.directory, name))
            except OSError:
                pass

    def _save(self, table: FileTable) -> None:
        path = self._path(table.key)
        if path is None:
            return
        if not self._swept:
            self._swept = True
            self._sweep_old_versions()
        cache_files.write(path, (_table_bytes(table),))


def _older_version(name: str) -> bool:
    """A table file of an earlier TableCache.VERSION (k<N>-<key>.npz or .table), which no version reads."""
    number = name[1:name.find("-")] if name.startswith("k") and "-" in name else ""
    return number.isdigit() and int(number) < TableCache.VERSION and name.endswith((".npz", ".table"))


# the header's version word: TableCache.VERSION, and in its high half a hash of the rules' layout
_FORMAT = TableCache.VERSION | (zlib.crc32(repr(RULE_DTYPE.descr).encode()) & 0xFFFF) << 16


def _table_bytes(table: FileTable) -> bytes:
    key, source = table.key.encode(), table.source.encode()
    ids = table.rule_ids if table.rule_ids.dtype in (np.uint16, np.uint32) else table.rule_ids.astype(np.uint32)
    names = key + source
    body = b"".join((names, bytes(-len(names) % 8), table.offsets.astype(np.uint32, copy=False).tobytes(),
                     ids.tobytes(), bytes(-(len(ids) * ids.itemsize) % 8),
                     np.ascontiguousarray(table.rules, RULE_DTYPE).tobytes()))
    return _TABLE_HEADER.pack(_TABLE_MAGIC, _FORMAT, len(key), len(source), len(table.offsets),
                              ids.itemsize, len(table.rules), zlib.crc32(body)) + body


def _table_size(header: bytes) -> tuple[int, int, int]:
    """(where its offsets start, where its rules start, its whole size) of a table whose header
    is `header`."""
    _magic, _version, key_n, source_n, rows, id_size, rules_n, _crc = _TABLE_HEADER.unpack_from(header)
    offsets_at = _TABLE_HEADER.size + key_n + source_n + (-(key_n + source_n) % 8)
    rules_at = offsets_at + 4 * rows + id_size * rows + (-(id_size * rows) % 8)
    return offsets_at, rules_at, rules_at + RULE_DTYPE.itemsize * rules_n


def _table_misfit(size: int, header: bytes, key: str) -> str:
    """What is wrong with a table file of `size` bytes and this header, for `key` ('' if nothing)."""
    magic, version, key_n, source_n, rows, id_size, rules_n, _crc = _TABLE_HEADER.unpack_from(header)
    if magic != _TABLE_MAGIC or version != _FORMAT or id_size not in (2, 4) or key_n != len(key):
        return "has no table header of this version"
    if rows > MAX_ROWS_PER_FILE or rules_n > MAX_ROWS_PER_FILE or source_n > _MAX_SOURCE_BYTES:
        return f"claims {rows} rows, {rules_n} rules and a source of {source_n} bytes"
    expected = _table_size(header)[2]
    return "" if size == expected else f"is {size} bytes where its header says {expected}"


def _parse_table(data: bytes, key: str) -> FileTable | None:
    """The table stored in `data` if it is whole and `key`'s, else None (a file cut short, another
    file's table written under this name, garbage)."""
    head = _TABLE_HEADER.size
    if len(data) < head:
        return None
    magic, version, key_n, source_n, rows, id_size, rules_n, crc = _TABLE_HEADER.unpack_from(data)
    offsets_at, rules_at, _size = _table_size(data)
    id_at = offsets_at + 4 * rows
    if (magic != _TABLE_MAGIC or version != _FORMAT or id_size not in (2, 4)
            or len(data) != rules_at + RULE_DTYPE.itemsize * rules_n
            or data[head:head + key_n] != key.encode() or zlib.crc32(memoryview(data)[head:]) != crc):
        return None
    try:
        source = data[head + key_n:head + key_n + source_n].decode()
    except UnicodeDecodeError:
        return None
    offsets = np.frombuffer(data, np.uint32, rows, offsets_at)
    ids = np.frombuffer(data, np.uint16 if id_size == 2 else np.uint32, rows, id_at)
    rules = np.frombuffer(data, RULE_DTYPE, rules_n, rules_at)
    if (len(ids) and int(ids.max()) >= rules_n) or not bool(np.all(offsets[1:] > offsets[:-1])):
        return None
    return FileTable(offsets, ids, rules, key, source)
