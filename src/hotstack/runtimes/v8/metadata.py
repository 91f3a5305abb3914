"""V8's post-mortem metadata: the `v8dbg_*` symbols that V8 builds into the `node` binary.

Each is an int in the binary's data (the symbols of value 0 live in .bss). They give the frame
layout (where the JSFunction is below the frame pointer), object field offsets and instance
types: everything needed to read functions, names and scripts from a live process, for the
V8 version that built the binary, without a table per version here.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace

import numpy as np

from ...symbols.elf import SHT_DYNSYM, SHT_SYMTAB, ElfError, ElfFile
from ..common.files import Unreadable

# a name between two NULs; the second is looked at, not taken, since it starts the next name
_V8DBG = re.compile(rb"\0(v8dbg_[A-Za-z0-9_]+)(?=\0)")
SHN_UNDEF = 0


def read_v8dbg(path: str) -> dict[str, int]:
    """Every v8dbg_* symbol of an ELF file with its int value ({} if it has none)."""
    out: dict[str, int] = {}
    with ElfFile(path) as elf:
        for table, strings in elf.symbol_tables():
            if out and table.type != SHT_DYNSYM:
                break       # the dynamic table's, where it has them
            if b"\0v8dbg_" not in strings:
                continue
            syms = elf.symbol_entries(table)
            wanted = {m.start() + 1: m.group(1).decode() for m in _V8DBG.finditer(strings)}
            names = syms["name"]
            hits = np.nonzero(np.isin(names, np.fromiter(wanted, dtype=np.uint32)) & (syms["shndx"] != SHN_UNDEF))[0]
            for i in hits:
                name = wanted[int(names[i])]
                if name in out:
                    continue
                value, size = int(syms[i]["value"]), int(syms[i]["size"])
                out[name] = _int_at(elf, value, size)
    return out


def _int_at(elf: ElfFile, vaddr: int, size: int) -> int:
    for seg in elf.segments:
        if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
            data = elf.read(vaddr - seg.vaddr + seg.offset, size if size in (1, 2, 4, 8) else 4)
            return int.from_bytes(data, "little", signed=True)
    return 0      # in .bss: the value is 0


@dataclass(frozen=True)
class V8Layout:
    """What we need of one binary's metadata (offsets in bytes)."""

    fp_function: int            # below the frame pointer, positive
    fp_context: int
    map_offset: int             # HeapObject::map
    instance_type: int          # Map::instance_type (u16)
    first_nonstring_type: int
    string_repr_mask: int
    string_encoding_mask: int
    one_byte_tag: int
    seq_tag: int
    cons_tag: int
    sliced_tag: int
    thin_tag: int
    external_tag: int
    external_resource: int | None     # ExternalString::resource; its characters' address follows
    string_length: int
    seq_chars: int
    cons_first: int
    cons_second: int
    sliced_parent: int
    sliced_offset: int
    thin_actual: int
    function_shared: int
    sfi_name_or_scope: int
    sfi_script: int
    script_name: int
    script_line_ends: int
    script_source: int
    fixed_array_length: int
    fixed_array_data: int
    type_sfi: int
    type_scope_info: int
    type_script: int
    scopeinfo_first_vars: int
    scopeinfo_ncontextlocals: int
    frame_types: dict
    # where a ScopeInfo's slots start: after its map (V8 9 on), or after a FixedArray's map and
    # length where ScopeInfo is a FixedArray (v8dbg_parent_ScopeInfo__FixedArray: Node 12-14)
    scopeinfo_slots: int = 8
    lines: "LineLayout | None" = None     # what gives a frame its executing line (None: not read)


@dataclass(frozen=True)
class LineLayout:
    """Where a frame's executing line comes from (offsets in bytes; positions.py reads them).

    An interpreted frame keeps its BytecodeArray and bytecode offset below its frame pointer; the
    array's source position table maps the offset to a script position. A compiled frame's pc lies
    in its function's Code, whose table maps the pc's offset in the instructions to a position."""

    fp_bytecode_array: int          # below the frame pointer, positive
    fp_bytecode_offset: int
    type_bytecode_array: int
    table_types: tuple[int, ...]    # what a source position table is: ByteArray (TrustedByteArray, V8 12 on)
    bytecode_table: int             # BytecodeArray::source_position_table
    bytecode_data: int              # where its bytecodes start
    type_code: int
    function_code: int              # JSFunction::code
    code_table: int                 # Code::source_position_table (a baseline Code: its bytecode offsets)
    code_start: int                 # Code::instruction_start: a pointer there, or (inline) the header size
    code_start_pointer: bool
    code_size: int                  # Code::instruction_size (int32)
    code_flags: int                 # Code::flags: its kind in kind_mask >> kind_shift
    kind_mask: int
    kind_shift: int
    kind_baseline: int              # -1: no baseline (Sparkplug) code in this V8
    # where a Code's instructions are found from a pc: code_start_pointer, in an InstructionStream
    # (map, Code, ...) whose instructions start stream_header bytes in; else inline in the Code
    stream_header: int = 0
    type_stream: int = -1           # InstructionStream's instance type (V8 11 on)
    bytecode_sizes: bytes = b""     # Bytecodes::kBytecodeSizes (baseline frames' lines; b"": not in the file)


def _one(meta: dict[str, int], *names: str) -> int:
    for n in names:
        if n in meta:
            return meta[n]
    raise KeyError(names[0])


_MISSING = object()


def _field(meta: dict[str, int], cls: str, name: str, default=_MISSING) -> int:
    """A class field's offset, whatever type its symbol names (the type part changes between V8
    versions: `name_or_scope_info__Object`, `..._Tagged_Object_`, `..._Tagged_NameOrScopeInfoT_`)."""
    prefix = f"v8dbg_class_{cls}__{name}__"
    for key, value in meta.items():
        if key.startswith(prefix):
            return value
    if default is _MISSING:
        raise KeyError(prefix)
    return default


def _sfi_script(meta: dict[str, int]) -> int:
    """SharedFunctionInfo's script: `script_or_debug_info` until V8 12, then `script`."""
    found = _field(meta, "SharedFunctionInfo", "script_or_debug_info", None)
    return found if found is not None else _field(meta, "SharedFunctionInfo", "script")


def _instance_type_offset(meta: dict[str, int]) -> int:
    """Map::instance_type; some builds leave it out of the metadata, but it is the u16 right
    before Map::bit_field in every layout since V8 7."""
    found = _field(meta, "Map", "instance_type", None)
    return found if found is not None else _field(meta, "Map", "bit_field") - 2


def _external_resource(meta: dict[str, int]) -> int | None:
    """ExternalString::resource, where the string bits are those heap.UNCACHED_EXTERNAL_STRING
    sits beside (representation 0x7, encoding 0x8); None otherwise (external strings not read)."""
    if (meta.get("v8dbg_StringRepresentationMask"), meta.get("v8dbg_StringEncodingMask")) != (7, 8):
        return None
    return _field(meta, "ExternalString", "resource", None)


def _fp_bytecode(meta: dict[str, int], fp_function: int) -> tuple[int, int]:
    """(BytecodeArray, bytecode offset) below the frame pointer: the metadata's (V8 9.5 on), else
    right below the function (V8 before 8.7, Node 12-14: no argument count slot between them)."""
    if "v8dbg_off_fp_bytecode_array" in meta:
        return -meta["v8dbg_off_fp_bytecode_array"], -meta.get("v8dbg_off_fp_bytecode_offset",
                                                                 meta["v8dbg_off_fp_bytecode_array"] - 8)
    step = 16 if "v8dbg_CodeKindBaseline" in meta else 8
    return fp_function + step, fp_function + step + 8


def _code_layout(meta: dict[str, int], function_shared: int) -> dict:
    """JSFunction::code and Code's fields, from the metadata where it has them. V8 11 split Code from
    its instructions (InstructionStream): Code then holds a pointer to them, and V8 11.x builds lost
    most of Code's metadata (the layout the OpenTelemetry profiler reads: the table, then the
    deoptimization data... instruction start, flags, size)."""
    wrapper = _field(meta, "Code", "wrapper", None)           # CodeWrapper: V8 12 on
    start = _field(meta, "Code", "instruction_start", None)
    pointer = any(k.startswith("v8dbg_class_Code__instruction_start__") and not k.endswith("uintptr_t")
                  for k in meta)
    table = _field(meta, "Code", "source_position_table", None)
    size = _field(meta, "Code", "instruction_size", None)
    flags = _field(meta, "Code", "flags", None)
    if start is None and table is not None:       # V8 11.x
        start, pointer = table + 16, True
        flags = start + 8 if flags is None else flags
        # kBuiltinIdOffset and kKindSpecificFlagsOffset sit between them before V8 11.4
        size = flags + (4 if "v8dbg_class_Code__bytecode_offset_table__ByteArray" not in meta else 8) \
            if size is None else size
    if start is None or size is None:
        raise KeyError("v8dbg_class_Code__instruction_start")
    if table is None:
        table = start - 24 if wrapper is not None else size - 16
    code = _field(meta, "JSFunction", "code", None)
    if code is None:
        code = function_shared - 8 if wrapper is not None else function_shared + 24
    stream = _field(meta, "InstructionStream", "instruction_start", 0)
    return dict(function_code=code, code_table=table, code_start=start, code_start_pointer=pointer,
                code_size=size, code_flags=flags if flags is not None else size + 4,
                stream_header=stream if pointer else 0,
                type_stream=meta.get("v8dbg_type_InstructionStream__INSTRUCTION_STREAM_TYPE", -1))


def line_layout(meta: dict[str, int], fp_function: int, function_shared: int) -> LineLayout | None:
    """Where frames' lines come from, or None if the metadata does not say (lines then are the
    function's own)."""
    try:
        length = _field(meta, "FixedArrayBase", "length")
        table = _field(meta, "BytecodeArray", "source_position_table", None)
        if table is None:       # lost from the metadata in V8 9.4; after the wrapper from V8 12
            wrapper = _field(meta, "BytecodeArray", "wrapper", None)
            table = wrapper + 8 if wrapper is not None else length + 24
        array, offset = _fp_bytecode(meta, fp_function)
        trusted = meta.get("v8dbg_type_TrustedByteArray__TRUSTED_BYTE_ARRAY_TYPE")
        return LineLayout(
            fp_bytecode_array=array, fp_bytecode_offset=offset,
            type_bytecode_array=_one(meta, "v8dbg_type_BytecodeArray__BYTECODE_ARRAY_TYPE"),
            table_types=tuple(t for t in (_one(meta, "v8dbg_type_ByteArray__BYTE_ARRAY_TYPE"), trusted)
                              if t is not None),
            bytecode_table=table,
            bytecode_data=_field(meta, "BytecodeArray", "data", table + 22),
            type_code=_one(meta, "v8dbg_type_Code__CODE_TYPE"),
            kind_mask=meta.get("v8dbg_CodeKindFieldMask", 0), kind_shift=meta.get("v8dbg_CodeKindFieldShift", 0),
            kind_baseline=meta.get("v8dbg_CodeKindBaseline", -1),
            **_code_layout(meta, function_shared))
    except KeyError:
        return None


def layout(meta: dict[str, int]) -> V8Layout | None:
    """The layout from a binary's metadata, or None if something we need is missing."""
    try:
        return checked_layout(meta)
    except Unreadable:
        return None


def checked_layout(meta: dict[str, int]) -> V8Layout:
    """The layout from a binary's metadata; Unreadable says what is missing or not read."""
    if not meta:
        raise Unreadable("no V8 post-mortem metadata (v8dbg_* symbols) in the file")
    try:
        fp_function = -_one(meta, "v8dbg_off_fp_function")
        fp_context = -_one(meta, "v8dbg_off_fp_context_or_frame_type", "v8dbg_off_fp_context")
        if fp_function <= 0 or fp_context <= 0 or meta.get("v8dbg_SystemPointerSize", 8) != 8:
            raise Unreadable("a frame layout other than 64-bit with the function and context below the frame pointer")
        if meta.get("v8dbg_TaggedSize", 8) != 8:
            raise Unreadable("pointer compression (4-byte tagged values) is not read")
        return V8Layout(
            fp_function=fp_function, fp_context=fp_context,
            map_offset=_field(meta, "HeapObject", "map", 0),
            instance_type=_instance_type_offset(meta),
            first_nonstring_type=_one(meta, "v8dbg_FirstNonstringType"),
            string_repr_mask=_one(meta, "v8dbg_StringRepresentationMask"),
            string_encoding_mask=_one(meta, "v8dbg_StringEncodingMask"),
            one_byte_tag=_one(meta, "v8dbg_OneByteStringTag"),
            seq_tag=meta.get("v8dbg_SeqStringTag", 0), cons_tag=_one(meta, "v8dbg_ConsStringTag"),
            sliced_tag=_one(meta, "v8dbg_SlicedStringTag"), thin_tag=_one(meta, "v8dbg_ThinStringTag"),
            external_tag=_one(meta, "v8dbg_ExternalStringTag"),
            external_resource=_external_resource(meta),
            string_length=_field(meta, "String", "length"),
            seq_chars=_field(meta, "SeqOneByteString", "chars"),
            cons_first=_field(meta, "ConsString", "first"),
            cons_second=_field(meta, "ConsString", "second"),
            sliced_parent=_field(meta, "SlicedString", "parent"),
            sliced_offset=_field(meta, "SlicedString", "offset"),
            thin_actual=_field(meta, "ThinString", "actual"),
            function_shared=_field(meta, "JSFunction", "shared"),
            sfi_name_or_scope=_field(meta, "SharedFunctionInfo", "name_or_scope_info"),
            sfi_script=_sfi_script(meta),
            script_name=_field(meta, "Script", "name"),
            script_line_ends=_field(meta, "Script", "line_ends", 0),
            script_source=_field(meta, "Script", "source"),
            fixed_array_length=_field(meta, "FixedArrayBase", "length"),
            fixed_array_data=_field(meta, "FixedArray", "data", 16),
            type_sfi=_one(meta, "v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE"),
            type_scope_info=_one(meta, "v8dbg_type_ScopeInfo__SCOPE_INFO_TYPE"),
            type_script=_one(meta, "v8dbg_type_Script__SCRIPT_TYPE"),
            scopeinfo_first_vars=_one(meta, "v8dbg_scopeinfo_idx_first_vars"),
            scopeinfo_ncontextlocals=_one(meta, "v8dbg_scopeinfo_idx_ncontextlocals"),
            frame_types={v: k[len("v8dbg_frametype_"):] for k, v in meta.items() if k.startswith("v8dbg_frametype_")},
            scopeinfo_slots=(_field(meta, "FixedArray", "data", 16) if "v8dbg_parent_ScopeInfo__FixedArray" in meta
                             else 8),
            lines=line_layout(meta, fp_function, _field(meta, "JSFunction", "shared")),
        )
    except KeyError as e:
        raise Unreadable(f"the metadata lacks {e.args[0]}") from None


BYTECODE_SIZES = "_ZN2v88internal11interpreter9Bytecodes14kBytecodeSizesE"


def read_bytecode_sizes(path: str) -> bytes:
    """V8's Bytecodes::kBytecodeSizes[3][kBytecodeCount] (uint8: each bytecode's length at each
    operand scale) from the file's symbol table, b"" if it has not the symbol (a stripped libnode)."""
    with ElfFile(path) as elf:
        want = BYTECODE_SIZES.encode()
        for table, strings in elf.symbol_tables((SHT_SYMTAB, SHT_DYNSYM)):
            at = strings.find(b"\0" + want + b"\0")
            if at < 0:
                continue
            syms = elf.symbol_entries(table)
            hits = np.nonzero((syms["name"] == at + 1) & (syms["shndx"] != SHN_UNDEF))[0]
            for i in hits:
                value, size = int(syms[i]["value"]), int(syms[i]["size"])
                if 0 < size < 3 * 256 and size % 3 == 0:
                    data = _bytes_at(elf, value, size)
                    if data and all(0 < b < 32 for b in data):
                        return data
    return b""


def _bytes_at(elf: ElfFile, vaddr: int, size: int) -> bytes:
    for seg in elf.segments:
        if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.filesz:
            return elf.read(vaddr - seg.vaddr + seg.offset, size)
    return b""


def _with_sizes(found: V8Layout, path: str) -> V8Layout:
    """The layout with the file's bytecode lengths, where it reads lines."""
    if found.lines is None:
        return found
    return replace(found, lines=replace(found.lines, bytecode_sizes=read_bytecode_sizes(path)))


def binary_layout(path: str) -> V8Layout | None:
    try:
        found = layout(read_v8dbg(path))
        return _with_sizes(found, path) if found is not None else None
    except (ElfError, OSError, ValueError, struct.error):
        return None


def checked_binary_layout(path: str) -> V8Layout | None:
    """The layout of a file that should hold V8 (a node executable, a libnode): None if it cannot
    be read as an ELF file, Unreadable if it has no usable metadata."""
    try:
        meta = read_v8dbg(path)
    except (ElfError, OSError, ValueError, struct.error):
        return None
    found = checked_layout(meta)
    try:
        return _with_sizes(found, path)
    except (ElfError, OSError, ValueError, struct.error):
        return found
