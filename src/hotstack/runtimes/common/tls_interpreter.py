"""What the interpreters whose running state a thread-local variable holds (Ruby's ruby_current_ec,
Perl's PL_current_context: where it lives, common/elf_tls.py) do the same way: detect() (the files
of a process that may be the interpreter, each inspected once, and the process's own TLS slot,
which the kernel walker's record carries) and the read of that slot."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import TypeVar

from ... import procs
from .files import Loaded, exe_name, interpreter_files
from .memory import MemoryReadError

T = TypeVar("T")
MAX_MODULE = 1 << 16     # a TLS module id past this is no loader's (the slot holds something else)


def filled_tls(mem: procs.Process, base: int, dtv: bool, slot: int, offset: int) -> tuple[int, int] | None:
    """(module id, offset) the kernel walker finds the variable with, from the slot (a vaddr of the
    file loaded at `base`) the loader filled: DTV, the module id it wrote and the variable's
    `offset` in that module's block; else (TP) no module and the offset from the thread pointer it
    wrote. None while the loader has not filled the slot."""
    if dtv:
        module = mem.u64(base + slot)
        return (module, offset) if 0 < module <= MAX_MODULE else None
    tp_offset = struct.unpack("<q", mem.read(base + slot, 8))[0]
    return (0, tp_offset) if tp_offset else None


def detect_tls_interpreter(process: procs.Process | int, runtime: str, label: str, name: re.Pattern[str],
                           library_word: str, cache: dict, inspect: Callable[[str], T],
                           dtv: Callable[[T], bool], fields: Callable[[T, int, procs.Process], dict | None]
                           ) -> tuple[procs.Process, T, Loaded, dict] | None:
    """(the process, what `inspect(path)` tells of its interpreter file, where the file is loaded,
    the walker's record fields) of the `runtime` interpreter `process` (a Process, or a live one's
    pid) runs: a process whose executable is named for the runtime or is its launcher (runs()). None:
    not the runtime, its TLS slot not filled yet (`fields` gives None), or gone."""
    process = procs.as_process(process)
    for binary, at in interpreter_files(process, runtime, label, lambda p: runtime in exe_name(p), runtime, name,
                                        library_word, cache, lambda path, _shown: inspect(path)):
        if "ld-musl" in at.text and dtv(binary):
            return None       # musl's DTV holds 8-byte entries and differs in layout: not tested
        try:
            found = fields(binary, at.base, process)
        except MemoryReadError:
            return None
        return (process, binary, at, found) if found is not None else None
    return None


__all__ = ["detect_tls_interpreter", "filled_tls"]
