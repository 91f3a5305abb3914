"""Is a process a Ruby interpreter, which version, and how does a thread find its execution context?

The interpreter is the mapped ELF file (libruby-X.Y.so, or a static `ruby`) that defines
`ruby_version`; its text ("3.1.2") gives the version. The thread's execution context is found
the way Ruby finds it:
- 3.x: the thread-local `ruby_current_ec`. In a shared libruby built for the general-dynamic
  TLS model the loader fills a DTPMOD64 slot with the library's TLS module id (read here from the
  process) and the variable sits at its symbol value inside that module's block (RB_EC_DTV).
  With a TLSDESC or TPOFF64 slot the loader writes the offset from the thread pointer (RB_EC_TP).
- 3.0 without TLS: `ruby_single_main_ractor`'s running ec (RB_EC_RACTOR); 2.x:
  `ruby_current_execution_context_ptr` (RB_EC_GLOBAL). Both name the thread holding the GVL only.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace

import numpy as np

from ... import procs
from ...bpf import schema
from ...symbols.elf import ElfError, ElfFile
from ..common.elf_tls import R_X86_64_DTPMOD64, reloc_offsets, tls_access
from ..common.files import Unreadable, jump_targets, symbol_spans, symbols
from ..common.memory import ReadThrough
from ..common.tls_interpreter import detect_tls_interpreter, filled_tls
from ..common.jit import jit_regions
from .offsets import RubyOffsets, offsets_for

_NAME = re.compile(r"(?:^|/)(?:libruby[^/]*\.so[^/]*|ruby[0-9.]*)$")
_VERSION = re.compile(rb"^(\d)\.(\d+)\.(\d+)\0")
_WANTED = (b"ruby_version", b"ruby_current_ec", b"ruby_single_main_ractor", b"ruby_current_execution_context_ptr",
           b"rb_sym_all_symbols", b"rb_vm_exec")


@dataclass(frozen=True)
class RubyBinary:
    """What one interpreter file tells us, independent of any process (cacheable per file)."""

    path: str
    version: tuple[int, int, int]
    offsets: RubyOffsets
    ec_mode: int
    tls_slot: int              # vaddr of the loader-filled slot (module id, or TLSDESC/TPOFF64 offset)
    tls_offset: int            # RB_EC_DTV: offset of ruby_current_ec in the module's TLS block
    ec_address: int            # vaddr of the global (RB_EC_GLOBAL / RB_EC_RACTOR)
    all_symbols: int           # vaddr of rb_sym_all_symbols (finds the symbol table for C-function names)
    file_size: int
    vm_exec: tuple[int, int] = (0, 0)   # [start, end) vaddr of rb_vm_exec where no symbol names it


@dataclass(frozen=True)
class RubyProcess(ReadThrough):
    pid: int
    binary: RubyBinary
    base: int
    record_fields: dict
    jit: tuple = ()            # anonymous executable mappings (YJIT's code), runtimes/common/jit.py
    file_name: str = ""        # the interpreter file's name as the process maps it (its frames' module)
    process: procs.Process | None = None     # what it was read through (None: the live process `pid`)

    @property
    def version(self) -> tuple[int, int, int]:
        return self.binary.version

    @property
    def offsets(self) -> RubyOffsets:
        return self.binary.offsets


# An exported function whose first act is GET_EC(): where ruby_current_ec is not in the dynamic
# symbols (a libruby built with hidden TLS, Debian 13's 3.3), its code says where the variable is.
_EC_READER = b"rb_current_receiver"
# x86-64's local-dynamic TLS access: lea rdi,[rip+tls_index]; call __tls_get_addr;
# mov rax,[rax+offset] (disp8 or disp32)
_LD_ACCESS = re.compile(rb"\x48\x8d\x3d(....)\xe8....\x48\x8b(?:\x40(.)|\x80(....))", re.S)


def _ec_from_reader(elf: ElfFile) -> tuple[int, int] | None:
    """(vaddr of the tls_index slot the loader fills with libruby's module id, ruby_current_ec's
    offset in libruby's TLS block), read from the code of _EC_READER; None where that code is not
    the local-dynamic access (checked against a DTPMOD64 relocation at the slot)."""
    span = symbol_spans(elf, (_EC_READER,)).get(_EC_READER)
    if span is None:
        return None
    off = elf.vaddr_to_file_offset(span[0])
    if off is None:
        return None
    code = elf.read(off, min(span[1] or 64, 64))
    m = _LD_ACCESS.search(code)
    if m is None:
        return None
    slot = span[0] + m.start(1) + 4 + struct.unpack("<i", m.group(1))[0]
    offset = m.group(2)[0] if m.group(2) is not None else struct.unpack("<i", m.group(3))[0]
    if slot not in reloc_offsets(elf, R_X86_64_DTPMOD64) or offset < 0:
        return None
    return slot, offset


# Exported functions that end by a tail jump to rb_vm_exec (vm_exec(ec) is their last act): where
# rb_vm_exec itself is a local symbol of a stripped library (Debian 13's 3.3), their common jump
# target is it.
_VM_EXEC_CALLERS = (b"rb_iseq_eval_main", b"rb_iseq_eval")


def _tail_jump_targets(elf: ElfFile, name: bytes, starts: np.ndarray) -> set[int]:
    """The function starts that a `jmp rel32` in function `name` leads to."""
    span = symbol_spans(elf, (name,)).get(name)
    off = elf.vaddr_to_file_offset(span[0]) if span and span[1] else None
    if off is None:
        return set()
    out = set()
    for target in jump_targets(elf.read(off, span[1]), span[0], conditional=False):
        j = int(np.searchsorted(starts, target))
        if j < len(starts) and starts[j] == target:
            out.add(target)
    return out


def _vm_exec_range(elf: ElfFile) -> tuple[int, int]:
    """[start, end) of rb_vm_exec found as the one tail-jump target its callers share (the end:
    the next function's start), or (0, 0)."""
    index = elf.function_index()       # (.eh_frame_hdr: every function's start)
    if index is None:
        return 0, 0
    starts = index[0]
    common: set[int] | None = None
    for name in _VM_EXEC_CALLERS:
        found = _tail_jump_targets(elf, name, starts)
        common = found if common is None else common & found
    if not common or len(common) != 1:
        return 0, 0
    start = common.pop()
    j = int(np.searchsorted(starts, start, side="right"))
    return (start, int(starts[j])) if j < len(starts) else (0, 0)


def inspect_binary(path: str) -> RubyBinary | None:
    """The interpreter facts of one ELF file, or None if it is not Ruby; Unreadable if it is and
    cannot be read."""
    try:
        with ElfFile(path) as elf:
            syms = symbols(elf, _WANTED)
            if b"ruby_version" not in syms:
                return None
            off = elf.vaddr_to_file_offset(syms[b"ruby_version"])
            m = _VERSION.match(elf.read(off, 16)) if off is not None else None
            if not m:
                raise Unreadable("ruby_version holds no version")
            version = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            shown = ".".join(map(str, version))
            offsets = offsets_for(version[:2])
            if offsets is None:
                raise Unreadable(f"no structure offsets known for Ruby {shown}", shown)
            mode, slot, tls_offset, ec_address = schema.RB_EC_NONE, 0, 0, 0
            access = tls_access(elf, b"ruby_current_ec", syms.get(b"ruby_current_ec", 0))
            if access is not None:
                mode = schema.RB_EC_DTV if access.dtv else schema.RB_EC_TP
                slot, tls_offset = access.slot, access.offset
            if mode == schema.RB_EC_NONE and (found := _ec_from_reader(elf)) is not None:
                mode, (slot, tls_offset) = schema.RB_EC_DTV, found
            if mode == schema.RB_EC_NONE and b"ruby_single_main_ractor" in syms:
                mode, ec_address = schema.RB_EC_RACTOR, syms[b"ruby_single_main_ractor"]
            if mode == schema.RB_EC_NONE and b"ruby_current_execution_context_ptr" in syms:
                mode, ec_address = schema.RB_EC_GLOBAL, syms[b"ruby_current_execution_context_ptr"]
            if mode == schema.RB_EC_NONE:
                raise Unreadable("no symbol leads to the running execution context (ruby_current_ec, "
                                 "ruby_single_main_ractor, ruby_current_execution_context_ptr)", shown)
            vm_exec = (0, 0) if b"rb_vm_exec" in syms else _vm_exec_range(elf)
            return RubyBinary(path, version, offsets, mode, slot, tls_offset, ec_address,
                              syms.get(b"rb_sym_all_symbols", 0), elf.size, vm_exec)
    except (ElfError, OSError, ValueError, struct.error):
        return None


_binaries: dict[tuple, RubyBinary | None] = {}


def record_fields(binary: RubyBinary, base: int, mem: procs.Process) -> dict | None:
    """The walker's record (struct rb_proc) for one process, or None if its TLS slot is not filled yet."""
    o = binary.offsets
    tls_module, tls_offset, ec_address = 0, binary.tls_offset, 0
    if binary.ec_mode in (schema.RB_EC_DTV, schema.RB_EC_TP):
        filled = filled_tls(mem, base, binary.ec_mode == schema.RB_EC_DTV, binary.tls_slot, binary.tls_offset)
        if filled is None:
            return None
        tls_module, tls_offset = filled
    else:
        ec_address = base + binary.ec_address
    return dict(ec_address=ec_address, tls_offset=tls_offset, tls_module=tls_module, ec_mode=binary.ec_mode,
                dtv_entry=16, running_ec=o.running_ec, ec_vm_stack=o.ec_vm_stack,
                ec_vm_stack_size=o.ec_vm_stack_size, ec_cfp=o.ec_cfp, cf_size=o.cf_size)


def detect(process: procs.Process | int) -> RubyProcess | None:
    """The Ruby interpreter running in `process` (a Process, or a live one's pid), or None (not Ruby,
    not started yet, or gone)."""
    found = detect_tls_interpreter(process, "ruby", "Ruby", _NAME, "libruby", _binaries, inspect_binary,
                                   lambda binary: binary.ec_mode == schema.RB_EC_DTV, record_fields)
    if found is None:
        return None
    process, binary, at, fields = found
    # the cached facts were read through the first process's mapping: this one's path opens the file
    return RubyProcess(process.pid, replace(binary, path=at.path) if binary.path != at.path else binary, at.base,
                       fields, jit_regions(at.mappings), at.file_name, process)
