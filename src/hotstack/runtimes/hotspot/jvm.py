"""One running JVM as the walker and the namer need it: offsets and code-cache bounds from its vmStructs.

Read once per process at attach (the code heaps are reserved at VM start and never move; the
interpreter is generated once). A JVM that has not initialized its code cache yet gives None:
the source retries a little later.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...bpf import schema
from ..common.memory import MemoryReadError, ProcessMemory
from .vmstructs import VMStructs, read_vmstructs


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
    # inlining: an nmethod's PcDescs and scopes (-1: not known for this JVM, no inlined frames)
    blob_code_begin: int = -1
    nm_pcs_offset: int = -1        # nmethod::_scopes_pcs_offset (from the blob)
    nm_pcs_end_offset: int = -1    # nmethod::_dependencies_offset: the end of the PcDescs
    nm_metadata_offset: int = -1
    nm_scopes_begin: int = -1      # CompiledMethod::_scopes_data_begin (an address)
    pc_desc_size: int = 16
    pc_desc_pc: int = 0
    pc_desc_scope: int = 4


def _offset(s: VMStructs, *candidates: tuple[str, str]) -> int:
    for key in candidates:
        if key in s.offsets:
            return s.offsets[key]
    raise KeyError(candidates[0])


def _code_heaps(mem: ProcessMemory, s: VMStructs) -> list[tuple[int, int, int, int]]:
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
        n = mem.i32(array + s.offsets[("GrowableArrayBase", "_len")])
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


def read_layout(pid: int) -> JvmLayout | None:
    """The layout of a running JVM; None if `pid` is no JVM. NotReady if it is one still starting."""
    s = read_vmstructs(pid)
    if s is None:
        return None
    mem = ProcessMemory(pid)
    try:
        heaps = _code_heaps(mem, s)
        low = mem.u64(s.addresses[("CodeCache", "_low_bound")])
        high = mem.u64(s.addresses[("CodeCache", "_high_bound")])
        queue = mem.u64(s.addresses[("AbstractInterpreter", "_code")])
        if not queue or not low:
            raise NotReady("no interpreter yet")
        interp_low = mem.u64(queue + s.offsets[("StubQueue", "_stub_buffer")])
        interp_high = interp_low + mem.i32(queue + s.offsets[("StubQueue", "_buffer_limit")])
    except MemoryReadError as e:
        raise NotReady(str(e)) from e
    except KeyError:
        return None
    try:
        nmethod_method = _offset(s, ("CompiledMethod", "_method"), ("nmethod", "_method"))
        record = schema.HS_PROC.pack(
            code_low=low, code_high=high, interp_low=interp_low, interp_high=interp_high,
            heap_block=s.sizes["HeapBlock"],
            block_used=_offset(s, ("HeapBlock", "_header")) + _offset(s, ("HeapBlock::Header", "_used")),
            blob_frame_size=s.offsets[("CodeBlob", "_frame_size")],
            blob_frame_complete=s.offsets[("CodeBlob", "_frame_complete_offset")],
            blob_code_begin=s.offsets[("CodeBlob", "_code_begin")],
            blob_name=s.offsets[("CodeBlob", "_name")], nmethod_method=nmethod_method)
        heap_records = b"".join(schema.HS_HEAP.pack(low=a, high=b, segmap=c, log2_segment=d) for a, b, c, d in heaps)
        record = (record[:schema.HS_PROC_TAIL_OFFSET] + heap_records).ljust(schema.HS_PROC.size, b"\0")
        return JvmLayout(
            method_const=s.offsets[("Method", "_constMethod")],
            const_constants=s.offsets[("ConstMethod", "_constants")],
            const_name_index=s.offsets[("ConstMethod", "_name_index")],
            const_signature_index=s.offsets[("ConstMethod", "_signature_index")],
            cp_size=s.sizes["ConstantPool"], cp_tags=s.offsets[("ConstantPool", "_tags")],
            cp_holder=s.offsets[("ConstantPool", "_pool_holder")], cp_length=s.offsets[("ConstantPool", "_length")],
            cp_source_file=s.offsets.get(("ConstantPool", "_source_file_name_index"), -1),
            klass_name=s.offsets[("Klass", "_name")], symbol_length=s.offsets[("Symbol", "_length")],
            symbol_body=s.offsets[("Symbol", "_body")], blob_name=s.offsets[("CodeBlob", "_name")],
            nmethod_method=nmethod_method, record=record,
            blob_code_begin=s.offsets[("CodeBlob", "_code_begin")],
            nm_pcs_offset=s.offsets.get(("nmethod", "_scopes_pcs_offset"), -1),
            nm_pcs_end_offset=s.offsets.get(("nmethod", "_dependencies_offset"), -1),
            nm_metadata_offset=s.offsets.get(("nmethod", "_metadata_offset"), -1),
            nm_scopes_begin=s.offsets.get(("CompiledMethod", "_scopes_data_begin"),
                                          s.offsets.get(("nmethod", "_scopes_data_begin"), -1)),
            pc_desc_size=s.sizes.get("PcDesc", 16), pc_desc_pc=s.offsets.get(("PcDesc", "_pc_offset"), 0),
            pc_desc_scope=s.offsets.get(("PcDesc", "_scope_decode_offset"), 4))
    except KeyError:
        return None
