"""Is a process PHP, which version, and where is its executor_globals?"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ... import procs
from ...procs.maps import parse_maps
from ...symbols.elf import ElfError, ElfFile
from ..python.detect import _load_base, _symbols, inspected_once
from ..ruby.detect import exe_name
from ..ruby.jit import jit_regions

_NAME = re.compile(r"(?:^|/)(?:php(?:-fpm|-cgi)?|libphp)(\d)\.(\d+)(?:\.so)?$")


@dataclass(frozen=True)
class PhpOffsets:
    version: tuple[int, int]
    current_execute_data: int = 488      # in zend_executor_globals
    ed_func: int = 24
    ed_call_info: int = 40               # Z_TYPE_INFO(This)
    ed_prev: int = 48
    fn_type: int = 0                     # zend_function.type: 1 internal, 2 user
    fn_name: int = 8                     # common.function_name (zend_string *)
    fn_scope: int = 16                   # common.scope (zend_class_entry *)
    op_filename: int = 152               # op_array.filename
    op_line_start: int = 160
    op_last: int = 80                    # op_array.last (uint32): how many opcodes
    op_opcodes: int = 88                 # op_array.opcodes; 0: not known for the version
    op_lineno: int = 24                  # zend_op.lineno
    str_len: int = 16
    str_val: int = 24
    str_h: int = 8                       # zend_string.h
    ce_name: int = 8


# op_array.last/opcodes as in php-src's zend_compile.h of each version; 8.2 moved T and
# run_time_cache into the common elements. Where not checked against a version's header: 0
_V82 = PhpOffsets((8, 2))
_TABLE = {
    (7, 4): replace(_V82, version=(7, 4), op_filename=136, op_line_start=144, op_opcodes=0),
    (8, 0): replace(_V82, version=(8, 0), op_filename=144, op_line_start=152, op_last=68, op_opcodes=72),
    (8, 1): replace(_V82, version=(8, 1), op_filename=144, op_line_start=152, op_last=68, op_opcodes=72),
    (8, 2): _V82,
    (8, 3): replace(_V82, version=(8, 3), op_filename=144, op_line_start=152, op_opcodes=0),
    (8, 4): replace(_V82, version=(8, 4), op_filename=168, op_line_start=176, op_opcodes=0),
}
TESTED = ((8, 2),)


@dataclass(frozen=True)
class PhpProcess:
    pid: int
    path: str
    offsets: PhpOffsets
    executor_globals: int       # in the process
    jit: tuple = ()             # anonymous executable mappings (opcache's JIT buffer), unwind/ruby/jit.py


_binaries: dict[tuple, tuple[PhpOffsets, int] | None] = {}


def _inspect(path: str, name: str) -> tuple[PhpOffsets, int] | None:
    m = _NAME.search(name)
    offsets = _TABLE.get((int(m.group(1)), int(m.group(2)))) if m else None
    if offsets is None:
        return None
    try:
        with ElfFile(path) as elf:
            eg = _symbols(elf, (b"executor_globals",)).get(b"executor_globals")
    except (ElfError, OSError, ValueError):
        return None
    return (offsets, eg) if eg else None


def detect(pid: int) -> PhpProcess | None:
    """The PHP interpreter of `pid`, or None; only `php*` executables are looked into (this runs
    for every new process of the host)."""
    if "php" not in exe_name(pid):
        return None
    text = procs.read_maps_text(pid, recent=True)   # the pid watcher's read of this round
    if "php" not in text:
        return None
    mappings = parse_maps(text)
    root = procs.root_path(pid)
    seen = set()
    for cand in mappings:
        if not cand.is_file or cand.file_path in seen or not _NAME.search(cand.file_path):
            continue
        seen.add(cand.file_path)
        path = root + cand.file_path
        found = inspected_once(_binaries, path, lambda: _inspect(path, cand.file_path))
        if found is None:
            continue
        base = _load_base(path, [m for m in mappings if m.file_path == cand.file_path])
        if base is None:
            continue
        return PhpProcess(pid, path, found[0], base + found[1], jit_regions(mappings))
    return None
