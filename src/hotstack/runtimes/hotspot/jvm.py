"""One running JVM as the walker and the namer need it: offsets and code-cache bounds from its vmStructs.

Read once per process at attach (the code heaps are reserved at VM start and never move; the
interpreter is generated once). A JVM that has not initialized its code cache yet gives None:
the source retries a little later.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import procs
from ...bpf import schema
from ..common.memory import MemoryReadError, Process
from ..common.files import Unreadable
from .vmstructs import VMStructs, jdk_major, read_vmstructs, vm_flag, vm_release


# Where an interpreter frame keeps its bytecode pointer, bytes below its rbp (frame_x86.hpp): JDK 9
# added a slot (the mirror) above it.
INTERP_BCP = 64
INTERP_BCP_JDK8 = 56


class NotReady(Exception):
    """The JVM is not far enough in its start (no code cache or interpreter yet)."""


@dataclass(frozen=True)
class JvmLayout:
    """Offsets (bytes) of the fields read to name a Method, and what the kernel walker needs."""

    method_const: int          # Method::_constMethod
    const_constants: int       # ConstMethod::_constants
    const_name_index: int      # u16
    const_signature_index: int
    cp_size: int               # sizeof(ConstantPool): the entries follow it
    cp_tags: int               # ConstantPool::_tags (Array<u1>*)
    cp_holder: int             # ConstantPool::_pool_holder
    cp_length: int             # int
    cp_source_file: int        # u16 index of the SourceFile attribute's name (0: none)
    klass_name: int            # Klass::_name (Symbol*)
    symbol_length: int         # u16
    symbol_body: int
    blob_name: int             # CodeBlob::_name (const char*)
    nmethod_method: int        # CompiledMethod::_method / nmethod::_method
    record: bytes              # struct hs_proc for the kernel
    cp_source_in_klass: bool = False  # cp_source_file is InstanceKlass's (JDK 11), not the pool's
    # inlining: an nmethod's PcDescs and scopes (-1: not known for this JVM, no inlined frames)
    blob_code_begin: int = -1      # CodeBlob::_code_begin (an address), or _code_offset (JDK 23 on)
    code_begin_relative: bool = False  # blob_code_begin is _code_offset: an int from the blob
    nm_pcs_offset: int = -1        # nmethod::_scopes_pcs_offset
    nm_pcs_end_offset: int = -1    # the end of the PcDescs: _dependencies_offset, or _scopes_data_offset
    nm_metadata_offset: int = -1   # nmethod::_metadata_offset (from the blob), before JDK 25
    nm_scopes_begin: int = -1      # CompiledMethod::_scopes_data_begin (an address), JDK 9-22
    nm_scopes_offset: int = -1     # nmethod::_scopes_data_offset (from the blob), JDK 8
    # JDK 25: PcDescs and scopes in the nmethod's immutable data (offsets from nmethod::_immutable_data,
    # the scopes at _scopes_data_offset), its metadata in the blob's mutable data after the relocations
    nm_immutable_data: int = -1
    blob_mutable_data: int = -1    # CodeBlob::_mutable_data (an address)
    blob_relocation_size: int = -1
    stream_excess: int = 0         # CompressedReadStream's byte excess: 1 from JDK 21 (lines.read_int)
    pc_desc_size: int = 16
    pc_desc_pc: int = 0
    pc_desc_scope: int = 4
    # lines (lines.py): a ConstMethod's bytecodes follow it (sizeof ConstMethod), its compressed line
    # number table follows them when a bit of its flags says so; -1: not known for this JVM (no lines)
    const_size: int = -1           # sizeof(ConstMethod)
    const_code_size: int = -1      # ConstMethod::_code_size (u2)
    const_flags: int = -1          # ConstMethod::_flags (u2), or _flags._flags (u4) from JDK 21
    const_flags_size: int = 2
    has_line_table: int = 0        # the flag bit: ConstMethod::_has_linenumber_table or ConstMethodFlags'
    invocation_entry_bci: int = -1  # InvocationEntryBci: added to a scope's stored bci
    lines_missing: str = ""        # what this JVM's vmStructs lack for lines ("" if nothing)
    loop_lines_missing: str = ""   # why compiled loops have no lines ("" if they have: JDK 8's C2, below)
    release: str = ""              # the JVM's release, when lines_missing or loop_lines_missing is said

    @property
    def reads_lines(self) -> bool:
        """Whether bytecode indices of this JVM's methods can be turned into lines."""
        return not self.lines_missing

    @property
    def reads_inlining(self) -> bool:
        """Whether this JVM's nmethods' scopes can be read (inlined frames)."""
        if min(self.nm_pcs_offset, self.nm_pcs_end_offset, self.blob_code_begin) < 0:
            return False
        if self.nm_immutable_data >= 0:
            return min(self.blob_mutable_data, self.blob_relocation_size) >= 0
        return self.nm_metadata_offset >= 0 and max(self.nm_scopes_begin, self.nm_scopes_offset) >= 0


def _offset(s: VMStructs, *candidates: tuple[str, str]) -> int:
    for key in candidates:
        if key in s.offsets:
            return s.offsets[key]
    raise KeyError(candidates[0])


def _code_begin(s: VMStructs) -> tuple[int, bool]:
    """(offset, relative) of a code blob's code start: CodeBlob::_code_begin, an address, until
    JDK 22; CodeBlob::_code_offset, an int from the blob, since."""
    if ("CodeBlob", "_code_begin") in s.offsets:
        return s.offsets[("CodeBlob", "_code_begin")], False
    return s.offsets[("CodeBlob", "_code_offset")], True


def _blob_flags(s: VMStructs, code_begin_relative: bool) -> int:
    """hs_proc.blob_flags: how the kernel walker reads a CodeBlob's code begin and frame-complete offset."""
    complete = s.field_types.get(("CodeBlob", "_frame_complete_offset"), "int")
    if complete not in ("int", "int16_t"):
        raise KeyError(f"CodeBlob::_frame_complete_offset of type {complete}")
    flags = schema.HS_BLOB_COMPLETE_S16 if complete == "int16_t" else 0
    return flags | (schema.HS_BLOB_CODE_OFFSET if code_begin_relative else 0)


def _source_file(s: VMStructs) -> tuple[int, bool]:
    """(offset, in the class) of the u16 pool index of a class's SourceFile: ConstantPool's since
    JDK 13, InstanceKlass's before; (-1, False) if neither."""
    if ("ConstantPool", "_source_file_name_index") in s.offsets:
        return s.offsets[("ConstantPool", "_source_file_name_index")], False
    return s.offsets.get(("InstanceKlass", "_source_file_name_index"), -1), True


def _nmethod_sections(s: VMStructs) -> dict[str, int]:
    """Where an nmethod's PcDescs, scopes and metadata are (JvmLayout's nm_* fields)."""
    o = s.offsets
    if ("nmethod", "_immutable_data") in o:
        return dict(nm_immutable_data=o[("nmethod", "_immutable_data")],
                    nm_pcs_offset=o.get(("nmethod", "_scopes_pcs_offset"), -1),
                    nm_pcs_end_offset=o.get(("nmethod", "_scopes_data_offset"), -1),
                    blob_mutable_data=o.get(("CodeBlob", "_mutable_data"), -1),
                    blob_relocation_size=o.get(("CodeBlob", "_relocation_size"), -1))
    sections = dict(nm_pcs_offset=o.get(("nmethod", "_scopes_pcs_offset"), -1),
                    nm_pcs_end_offset=o.get(("nmethod", "_dependencies_offset"), -1),
                    nm_metadata_offset=o.get(("nmethod", "_metadata_offset"), -1),
                    nm_scopes_begin=o.get(("CompiledMethod", "_scopes_data_begin"),
                                          o.get(("nmethod", "_scopes_data_begin"), -1)))
    if sections["nm_scopes_begin"] < 0:     # JDK 8: an offset from the blob
        sections["nm_scopes_offset"] = o.get(("nmethod", "_scopes_data_offset"), -1)
    return sections


def _line_fields(s: VMStructs) -> dict:
    """JvmLayout's fields for lines: the ConstMethod offsets, its flags' size and line-table bit
    (ConstMethod's own constants before JDK 21, ConstMethodFlags' since), or lines_missing."""
    o = s.offsets
    flags_key = next((k for k in (("ConstMethod", "_flags"), ("ConstMethod", "_flags._flags")) if k in o), None)
    bit = next((s.constants[k] for k in ("ConstMethod::_has_linenumber_table",
                                         "ConstMethodFlags::_misc_has_linenumber_table") if k in s.constants), 0)
    missing = [what for what, absent in (
        ("ConstMethod::_flags", flags_key is None),
        ("ConstMethod::_code_size", ("ConstMethod", "_code_size") not in o),
        ("the size of ConstMethod", "ConstMethod" not in s.sizes),
        ("ConstMethod's _has_linenumber_table constant", not bit)) if absent]
    if missing:
        return dict(lines_missing="its vmStructs lack " + ", ".join(missing))
    flags_type = s.field_types.get(flags_key, "u2")
    if flags_type not in ("u2", "u4"):
        return dict(lines_missing=f"its ConstMethod flags are of type {flags_type}")
    return dict(const_size=s.sizes["ConstMethod"], const_code_size=o[("ConstMethod", "_code_size")],
                const_flags=o[flags_key], const_flags_size=2 if flags_type == "u2" else 4, has_line_table=bit,
                invocation_entry_bci=s.constants.get("InvocationEntryBci", -1))


def _loop_lines_missing(mem: Process, s: VMStructs, major: int) -> str:
    """Why the lines of C2-compiled loops cannot be had, or "": a compiled frame's line is its pc's
    debug info, kept at calls and safepoints (DebugNonSafepoints: everywhere). JDK 8's C2 puts no
    safepoint in a counted loop (later ones poll in each strip-mined one), so such a loop's code has
    no debug info unless the flag is on."""
    if major > 8:
        return ""
    try:
        on = vm_flag(mem, s, "DebugNonSafepoints")
    except MemoryReadError:
        on = None
    if on:
        return ""
    return ("JDK 8's C2 keeps no debug info in counted loops; -XX:+UnlockDiagnosticVMOptions "
            "-XX:+DebugNonSafepoints keeps it")


def _major_version(mem: Process, s: VMStructs) -> int:
    """The JVM's feature version (8, 11, 17, 21, 25): JDK 8's JDK_Version::_current._major (its
    VM's own major version is HotSpot's, 25), else Abstract_VM_Version::_vm_major_version."""
    try:
        major = jdk_major(mem, s)
    except MemoryReadError:
        raise KeyError("JDK_Version::_current") from None
    if major:
        return major
    address = s.addresses.get(("Abstract_VM_Version", "_vm_major_version"))
    if not address:
        raise KeyError("Abstract_VM_Version::_vm_major_version")
    try:
        return mem.i32(address)
    except MemoryReadError:
        raise KeyError("Abstract_VM_Version::_vm_major_version") from None


def _code_heaps(mem: Process, s: VMStructs) -> list[tuple[int, int, int, int]]:
    """(low, reserved high, segment map, log2 segment size) of each CodeHeap."""
    heaps_address = s.addresses.get(("CodeCache", "_heaps"))
    vs_low, vs_high_boundary = s.offsets[("VirtualSpace", "_low")], s.offsets[("VirtualSpace", "_high_boundary")]
    memory, segmap = s.offsets[("CodeHeap", "_memory")], s.offsets[("CodeHeap", "_segmap")]
    log2 = s.offsets[("CodeHeap", "_log2_segment_size")]
    heaps = []
    if heaps_address:
        array = mem.u64(heaps_address)
        if not array:
            raise NotReady("no code heaps yet")
        # GrowableArrayBase::_len since JDK 16, GenericGrowableArray::_len before
        n = mem.i32(array + _offset(s, ("GrowableArrayBase", "_len"), ("GenericGrowableArray", "_len")))
        data = mem.u64(array + _offset(s, ("GrowableArray<CodeHeap*>", "_data"), ("GrowableArray<int>", "_data")))
        pointers = [mem.u64(data + 8 * i) for i in range(max(0, min(n, schema.HS_MAX_HEAPS)))]
    else:       # JDK 8: one heap
        pointers = [mem.u64(s.addresses[("CodeCache", "_heap")])]
    for heap in pointers:
        if not heap:
            continue
        heaps.append((mem.u64(heap + memory + vs_low), mem.u64(heap + memory + vs_high_boundary),
                      mem.u64(heap + segmap + vs_low), mem.i32(heap + log2)))
    if not heaps:
        raise NotReady("no code heaps yet")
    return heaps


def _code_bounds(mem: Process, s: VMStructs, heaps: list[tuple[int, int, int, int]]) -> tuple[int, int]:
    """The code cache's range: CodeCache::_low_bound .. _high_bound, or (JDK 8, which has neither)
    its heaps' reserved span."""
    if ("CodeCache", "_low_bound") in s.addresses:
        return mem.u64(s.addresses[("CodeCache", "_low_bound")]), mem.u64(s.addresses[("CodeCache", "_high_bound")])
    return min(heap[0] for heap in heaps), max(heap[1] for heap in heaps)


def read_layout(process: Process | int) -> JvmLayout | None:
    """The layout of a running JVM (a Process, or a live one's pid); None if it is no JVM. NotReady
    if it is one still starting, Unreadable if its vmStructs lack a field this reader needs."""
    mem = procs.as_process(process)
    s = read_vmstructs(mem)
    if s is None:
        return None
    try:
        heaps = _code_heaps(mem, s)
        low, high = _code_bounds(mem, s, heaps)
        queue = mem.u64(s.addresses[("AbstractInterpreter", "_code")])
        if not queue or not low:
            raise NotReady("no interpreter yet")
        interp_low = mem.u64(queue + s.offsets[("StubQueue", "_stub_buffer")])
        interp_high = interp_low + mem.i32(queue + s.offsets[("StubQueue", "_buffer_limit")])
    except MemoryReadError as e:
        raise NotReady(str(e)) from e
    except KeyError as e:
        raise _unreadable(mem, s, e) from None
    try:
        nmethod_method = _offset(s, ("CompiledMethod", "_method"), ("nmethod", "_method"))
        code_begin, code_begin_relative = _code_begin(s)
        major = _major_version(mem, s)
        source_file, source_in_klass = _source_file(s)
        record = schema.HS_PROC.pack(
            code_low=low, code_high=high, interp_low=interp_low, interp_high=interp_high,
            heap_block=s.sizes["HeapBlock"],
            block_used=_offset(s, ("HeapBlock", "_header")) + _offset(s, ("HeapBlock::Header", "_used")),
            blob_frame_size=s.offsets[("CodeBlob", "_frame_size")],
            blob_frame_complete=s.offsets[("CodeBlob", "_frame_complete_offset")],
            blob_code_begin=code_begin, blob_name=s.offsets[("CodeBlob", "_name")], nmethod_method=nmethod_method,
            blob_flags=_blob_flags(s, code_begin_relative), interp_bcp=INTERP_BCP_JDK8 if major <= 8 else INTERP_BCP)
        lines = _line_fields(s)
        lines["loop_lines_missing"] = _loop_lines_missing(mem, s, major)
        if lines.get("lines_missing") or lines["loop_lines_missing"]:
            lines["release"] = vm_release(mem, s)
        heap_records = b"".join(schema.HS_HEAP.pack(low=a, high=b, segmap=c, log2_segment=d) for a, b, c, d in heaps)
        record = (record[:schema.HS_PROC_TAIL_OFFSET] + heap_records).ljust(schema.HS_PROC.size, b"\0")
        return JvmLayout(
            method_const=s.offsets[("Method", "_constMethod")],
            const_constants=s.offsets[("ConstMethod", "_constants")],
            const_name_index=s.offsets[("ConstMethod", "_name_index")],
            const_signature_index=s.offsets[("ConstMethod", "_signature_index")],
            cp_size=s.sizes["ConstantPool"], cp_tags=s.offsets[("ConstantPool", "_tags")],
            cp_holder=s.offsets[("ConstantPool", "_pool_holder")], cp_length=s.offsets[("ConstantPool", "_length")],
            cp_source_file=source_file, cp_source_in_klass=source_in_klass,
            klass_name=s.offsets[("Klass", "_name")], symbol_length=s.offsets[("Symbol", "_length")],
            symbol_body=s.offsets[("Symbol", "_body")], blob_name=s.offsets[("CodeBlob", "_name")],
            nmethod_method=nmethod_method, record=record,
            blob_code_begin=code_begin, code_begin_relative=code_begin_relative, **_nmethod_sections(s),
            stream_excess=1 if major >= 21 else 0,
            pc_desc_size=s.sizes.get("PcDesc", 16), pc_desc_pc=s.offsets.get(("PcDesc", "_pc_offset"), 0),
            pc_desc_scope=s.offsets.get(("PcDesc", "_scope_decode_offset"), 4), **lines)
    except KeyError as e:
        raise _unreadable(mem, s, e) from None


def _unreadable(process: Process, s: VMStructs, missing: KeyError) -> Unreadable:
    """A JVM whose vmStructs lack what the walker or the names need (a JDK that renamed it)."""
    what = missing.args[0] if missing.args else "?"
    if isinstance(what, tuple):
        what = "::".join(what)
    return Unreadable(f"its vmStructs lack {what}", vm_release(process, s))
