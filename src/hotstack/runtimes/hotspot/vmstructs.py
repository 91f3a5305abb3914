"""The JVM's description of itself: the gHotSpotVM* tables that libjvm.so exports for debuggers.

`gHotSpotVMStructs` is an array of entries (type name, field name, type string, is static, offset,
address), `gHotSpotVMTypes` one of (type name, superclass, size ...), and the gHotSpotVM*Offset/Stride
variables say where each member sits in an entry. They are filled when the VM starts (the symbols are
in .bss), so they are read from the live process, never from the file. Everything a Java frame walker
needs (Method, ConstMethod, ConstantPool, Symbol, CodeBlob, nmethod, CodeHeap offsets) comes from here,
for the JVM that runs: one reader for JDK 8-27, no table per version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ... import procs
from ...symbols.elf import SHT_DYNSYM, ElfError, ElfFile
from ..common.memory import MemoryReadError, PagedMemory, Process
from ..common.files import candidates, holding, load_base, opened, runs, symbol_spans


MAX_ENTRIES = 10000
_LIBJVM = re.compile(r"/libjvm\.so$")
_GLOBALS = (
    "gHotSpotVMStructs", "gHotSpotVMStructEntryArrayStride", "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset", "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset", "gHotSpotVMStructEntryOffsetOffset", "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMTypes", "gHotSpotVMTypeEntryArrayStride", "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySizeOffset",
)
# the named int constants (flag bits, enum values): read where the JVM exports them
_INT_CONSTANTS = (
    "gHotSpotVMIntConstants", "gHotSpotVMIntConstantEntryArrayStride", "gHotSpotVMIntConstantEntryNameOffset",
    "gHotSpotVMIntConstantEntryValueOffset",
)


@dataclass
class VMStructs:
    """Field offsets (or static addresses) by (type, field), type sizes by name."""

    offsets: dict[tuple[str, str], int] = field(default_factory=dict)
    field_types: dict[tuple[str, str], str] = field(default_factory=dict)    # C type of each field
    addresses: dict[tuple[str, str], int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)   # int constants by name ("ConstMethod::_has_...")


def libjvm(process: procs.Process | int) -> tuple[str, int] | None:
    """(a path that opens the process's very libjvm.so, load bias), or None. `process`: a Process,
    or a live one's pid."""
    process = procs.as_process(process)
    # most processes of a host: one substring test (of the pid watcher's read of this round)
    if "/libjvm.so" not in process.exec_paths(recent=True) and not runs(process, "hotspot"):
        return None
    mappings = procs.parse_maps(process.maps_text(recent=True))
    holding(process, mappings)      # (libjvm is found by what it holds too)
    for _cand, path, its_mappings in opened(process, mappings, candidates(mappings, _LIBJVM, "libjvm", "hotspot")):
        base = load_base(path, its_mappings)
        if base is not None:
            return path, base
    return None


def _dynamic_symbols(path: str, names: tuple[str, ...]) -> dict[str, int]:
    with ElfFile(path) as elf:
        spans = symbol_spans(elf, tuple(name.encode() for name in names), (SHT_DYNSYM,))
    return {name.decode(): value for name, (value, _size) in spans.items()}


def _cstr(mem: Process, address: int, limit: int = 256) -> str:
    if not address:
        return ""
    raw = mem.read(address, limit) if limit else b""
    return raw.split(b"\0", 1)[0].decode("latin-1")


def _cstr_safe(mem: Process, address: int) -> str:
    """A C string that may sit near the end of a mapping: read in small steps."""
    out = b""
    while address and len(out) < 256:
        try:
            chunk = mem.read(address + len(out), 32)
        except MemoryReadError:
            break
        end = chunk.find(b"\0")
        if end >= 0:
            return (out + chunk[:end]).decode("latin-1")
        out += chunk
    return out.decode("latin-1")


def read_vmstructs(process: procs.Process | int) -> VMStructs | None:
    """The tables of a running JVM (a Process, or a live one's pid), or None (not a JVM, or not
    started far enough)."""
    process = procs.as_process(process)
    found = libjvm(process)
    if found is None:
        return None
    path, bias = found
    try:
        syms = _dynamic_symbols(path, _GLOBALS + _INT_CONSTANTS)
    except (ElfError, OSError):
        return None
    if not all(name in syms for name in _GLOBALS):
        return None
    mem = PagedMemory(process)      # the tables and their names do not change once the VM published them
    try:
        g = {name: mem.u64(bias + syms[name]) for name in _GLOBALS}
        if not g["gHotSpotVMStructs"] or not g["gHotSpotVMStructEntryArrayStride"]:
            return None
        out = VMStructs()
        entry, stride = g["gHotSpotVMStructs"], g["gHotSpotVMStructEntryArrayStride"]
        for _ in range(MAX_ENTRIES):
            raw = mem.read(entry, stride)
            type_name = _cstr_safe(mem, int.from_bytes(raw[g["gHotSpotVMStructEntryTypeNameOffset"]:][:8], "little"))
            if not type_name:
                break
            field_name = _cstr_safe(mem, int.from_bytes(raw[g["gHotSpotVMStructEntryFieldNameOffset"]:][:8], "little"))
            field_type = _cstr_safe(mem, int.from_bytes(raw[g["gHotSpotVMStructEntryTypeStringOffset"]:][:8], "little"))
            out.field_types[(type_name, field_name)] = field_type
            is_static = int.from_bytes(raw[g["gHotSpotVMStructEntryIsStaticOffset"]:][:4], "little")
            if is_static:
                out.addresses[(type_name, field_name)] = int.from_bytes(
                    raw[g["gHotSpotVMStructEntryAddressOffset"]:][:8], "little")
            else:
                out.offsets[(type_name, field_name)] = int.from_bytes(
                    raw[g["gHotSpotVMStructEntryOffsetOffset"]:][:8], "little")
            entry += stride
        entry, stride = g["gHotSpotVMTypes"], g["gHotSpotVMTypeEntryArrayStride"]
        for _ in range(MAX_ENTRIES):
            raw = mem.read(entry, stride)
            type_name = _cstr_safe(mem, int.from_bytes(raw[g["gHotSpotVMTypeEntryTypeNameOffset"]:][:8], "little"))
            if not type_name:
                break
            out.sizes[type_name] = int.from_bytes(raw[g["gHotSpotVMTypeEntrySizeOffset"]:][:8], "little")
            entry += stride
        if all(name in syms for name in _INT_CONSTANTS):
            out.constants = _int_constants(mem, {name: mem.u64(bias + syms[name]) for name in _INT_CONSTANTS})
    except MemoryReadError:
        return None
    return out if out.offsets else None


def _int_constants(mem: PagedMemory, g: dict[str, int]) -> dict[str, int]:
    """gHotSpotVMIntConstants: (name, int32 value) entries up to one without a name."""
    out: dict[str, int] = {}
    entry, stride = g["gHotSpotVMIntConstants"], g["gHotSpotVMIntConstantEntryArrayStride"]
    if not entry or not stride:
        return out
    for _ in range(MAX_ENTRIES):
        raw = mem.read(entry, stride)
        name = _cstr_safe(mem, int.from_bytes(raw[g["gHotSpotVMIntConstantEntryNameOffset"]:][:8], "little"))
        if not name:
            break
        out[name] = int.from_bytes(raw[g["gHotSpotVMIntConstantEntryValueOffset"]:][:4], "little", signed=True)
        entry += stride
    return out


def vm_release(process: procs.Process | int, structs: VMStructs) -> str:
    """The JVM's release string (e.g. "17.0.13+11-Debian-2"), from Abstract_VM_Version::_s_vm_release;
    JDK 8's, HotSpot's own version, after the JDK's ("8 (HotSpot 25.472-b08)")."""
    address = structs.addresses.get(("Abstract_VM_Version", "_s_vm_release"))
    if not address:
        return ""
    mem = procs.as_process(process)
    try:
        release = _cstr_safe(mem, mem.u64(address))
    except MemoryReadError:
        return ""
    major = jdk_major(mem, structs)
    if major and release and not release.startswith(str(major)):
        return f"{major} (HotSpot {release})"
    return release


def jdk_major(process: procs.Process | int, structs: VMStructs) -> int:
    """The JDK's feature version as JDK_Version::_current says (8 in JDK 8, whose VM's own version is
    HotSpot's, 25.x); 0 where it is not said. MemoryReadError if it cannot be read."""
    current = structs.addresses.get(("JDK_Version", "_current"))
    offset = structs.offsets.get(("JDK_Version", "_major"))
    if not current or offset is None:
        return 0
    return procs.as_process(process).u8(current + offset)


def vm_flag(process: procs.Process | int, structs: VMStructs, name: str) -> bool | None:
    """A boolean -XX flag of the JVM, from its table of flags (Flag::flags in JDK 8, JVMFlag::flags
    since); None if the table or the flag is not there. MemoryReadError if it cannot be read."""
    kind = next((k for k in ("Flag", "JVMFlag") if (k, "flags") in structs.addresses), None)
    if kind is None or (kind, "_name") not in structs.offsets or (kind, "_addr") not in structs.offsets:
        return None
    mem = PagedMemory(procs.as_process(process))
    table, count = mem.u64(structs.addresses[(kind, "flags")]), mem.u64(structs.addresses[(kind, "numFlags")])
    stride = structs.sizes.get(kind, 0)
    for i in range(min(count, MAX_ENTRIES) if stride else 0):
        entry = table + i * stride
        if _cstr_safe(mem, mem.u64(entry + structs.offsets[(kind, "_name")])) == name:
            return bool(mem.u8(mem.u64(entry + structs.offsets[(kind, "_addr")])))
    return None
