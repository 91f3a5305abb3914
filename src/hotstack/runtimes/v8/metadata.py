"""V8's post-mortem metadata: the `v8dbg_*` symbols that V8 builds into the `node` binary.

Each is an int in the binary's data (the symbols of value 0 live in .bss). They give the frame
layout (where the JSFunction is below the frame pointer), object field offsets and instance
types: everything needed to read functions, names and scripts from a live process, for the
V8 version that built the binary, without a table per version here.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from ...symbols.elf import SHT_DYNSYM, SHT_SYMTAB, ElfError, ElfFile
from ..common.files import ELF_SYM as _SYM, Unreadable

# a name between two NULs; the second is looked at, not taken, since it starts the next name
_V8DBG = re.compile(rb"\0(v8dbg_[A-Za-z0-9_]+)(?=\0)")
SHN_UNDEF = 0


def read_v8dbg(path: str) -> dict[str, int]:
    """Every v8dbg_* symbol of an ELF file with its int value ({} if it has none)."""
    out: dict[str, int] = {}
    with ElfFile(path) as elf:
        for kind in (SHT_DYNSYM, SHT_SYMTAB):
            for s in elf.sections:
                if s.type != kind or s.size == 0 or s.link >= len(elf.sections):
                    continue
                strtab = elf.sections[s.link]
                strings = elf.read(strtab.offset, strtab.size)
                if b"\0v8dbg_" not in strings:
                    continue
                syms = np.frombuffer(elf.read(s.offset, s.size - s.size % _SYM.itemsize), dtype=_SYM)
                wanted = {m.start() + 1: m.group(1).decode() for m in _V8DBG.finditer(strings)}
                names = syms["name"]
                hits = np.nonzero(np.isin(names, np.fromiter(wanted, dtype=np.uint32)) & (syms["shndx"] != SHN_UNDEF))[0]
                for i in hits:
                    name = wanted[int(names[i])]
                    if name in out:
                        continue
                    value, size = int(syms[i]["value"]), int(syms[i]["size"])
                    out[name] = _int_at(elf, value, size)
            if out:
                return out
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
        )
    except KeyError as e:
        raise Unreadable(f"the metadata lacks {e.args[0]}") from None


def binary_layout(path: str) -> V8Layout | None:
    try:
        return layout(read_v8dbg(path))
    except (ElfError, OSError, ValueError, struct.error):
        return None


def checked_binary_layout(path: str) -> V8Layout | None:
    """The layout of a file that should hold V8 (a node executable, a libnode): None if it cannot
    be read as an ELF file, Unreadable if it has no usable metadata."""
    try:
        meta = read_v8dbg(path)
    except (ElfError, OSError, ValueError, struct.error):
        return None
    return checked_layout(meta)
