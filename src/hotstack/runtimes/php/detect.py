"""Is a process PHP, which version, and where is its executor_globals?"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ... import procs
from ...symbols.elf import ElfError, ElfFile
from ..common.files import Unreadable, exe_name, interpreter_files, symbols
from ..common.jit import jit_regions
from ..common.memory import ReadThrough

_NAME = re.compile(r"(?:^|/)(?:php(?:-fpm|-cgi)?|libphp)(\d)\.(\d+)(?:\.so)?$")    # a version in the name
_FILE = re.compile(r"(?:^|/)(?:php[^/]*|libphp[^/]*\.so[^/]*)$")                  # what may be PHP


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
# run_time_cache into the common elements, 8.4 has two more pointers in them (7.4, 8.2, 8.4 and 8.5
# also checked in Debian's builds: every opcode's line inside its function). Where not checked: 0.
# 8.5's zend_executor_globals has 24 more bytes before current_execute_data (offsetof against
# Debian's php8.5-dev headers; its executor reads EG(current_execute_data) at 0x200).
_V82 = PhpOffsets((8, 2))
_TABLE = {
    (7, 4): replace(_V82, version=(7, 4), op_filename=136, op_line_start=144, op_last=60, op_opcodes=64),
    (8, 0): replace(_V82, version=(8, 0), op_filename=144, op_line_start=152, op_last=68, op_opcodes=72),
    (8, 1): replace(_V82, version=(8, 1), op_filename=144, op_line_start=152, op_last=68, op_opcodes=72),
    (8, 2): _V82,
    (8, 3): replace(_V82, version=(8, 3), op_filename=144, op_line_start=152, op_opcodes=0),
    (8, 4): replace(_V82, version=(8, 4), op_filename=168, op_line_start=176, op_last=96, op_opcodes=104),
    (8, 5): replace(_V82, version=(8, 5), current_execute_data=512, op_filename=168, op_line_start=176,
                    op_last=96, op_opcodes=104),
}
TESTED = ((8, 2),)


@dataclass(frozen=True)
class PhpProcess(ReadThrough):
    pid: int
    path: str
    offsets: PhpOffsets
    executor_globals: int       # in the process
    jit: tuple = ()             # anonymous executable mappings (opcache's JIT buffer), runtimes/common/jit.py
    process: procs.Process | None = None     # what it was read through (None: the live process `pid`)


_binaries: dict[tuple, tuple[PhpOffsets, int] | None] = {}


# the version PHP builds into its headers' string, in .rodata of every SAPI binary and libphp
_POWERED_BY = re.compile(rb"X-Powered-By: PHP/(\d+)\.(\d+)\.")


def _inspect(path: str, name: str) -> tuple[PhpOffsets, int] | None:
    """(offsets, executor_globals' address) of a PHP binary, None if it is not one; Unreadable if
    it is and its version has no offsets here. The version is read from the file (a copy or a link
    named `php` is PHP too), else from its name."""
    try:
        with ElfFile(path) as elf:
            eg = symbols(elf, (b"executor_globals",)).get(b"executor_globals")
            if not eg:
                return None
            rodata = elf.section(".rodata")
            m = _POWERED_BY.search(elf.section_data(rodata, cap=64 << 20)) if rodata is not None else None
    except (ElfError, OSError, ValueError):
        return None
    m = m or _NAME.search(name)
    if m is None:
        raise Unreadable("its version is neither in the file nor in its name")
    version = (int(m.group(1)), int(m.group(2)))
    offsets = _TABLE.get(version)
    if offsets is None:
        raise Unreadable(f"no structure offsets known for PHP {version[0]}.{version[1]}", f"{version[0]}.{version[1]}")
    return offsets, eg


def detect(process: procs.Process | int) -> PhpProcess | None:
    """The PHP interpreter of `process` (a Process, or a live one's pid), or None (not PHP, or gone)."""
    process = procs.as_process(process)
    for (offsets, executor_globals), at in interpreter_files(
            process, "php", "PHP", lambda p: "php" in exe_name(p), "php", _FILE, "libphp", _binaries, _inspect):
        return PhpProcess(process.pid, at.path, offsets, at.base + executor_globals, jit_regions(at.mappings), process)
    return None
