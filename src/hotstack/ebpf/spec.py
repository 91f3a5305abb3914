"""CollectionSpec: what a BPF object asks for, read from its ELF and BTF.

A spec is pure: reading the same object gives the same spec on every machine.
Everything that depends on the kernel happens in `collection.load`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from . import btf as btfmod
from .elf import STB_GLOBAL, STT_FUNC, STT_SECTION, BpfElf, Section
from .errors import ObjectFormatError

# Map types and flags the loader knows by number.
MAP_TYPE_ARRAY = 2
BPF_F_RDONLY_PROG = 1 << 7

PROG_TYPES = {
    # section prefix: (prog_type, expected_attach_type)
    "perf_event": (7, 0),
    "tracepoint": (5, 0),
    "raw_tracepoint": (17, 0),
    "uprobe": (2, 0),
    "uretprobe": (2, 0),
    "kprobe": (2, 0),
    "kretprobe": (2, 0),
    "tp_btf": (26, 23),     # BPF_PROG_TYPE_TRACING, BPF_TRACE_RAW_TP
    "fentry": (26, 24),     # BPF_TRACE_FENTRY
    "fexit": (26, 25),      # BPF_TRACE_FEXIT
}

R_BPF_64_64 = 1
R_BPF_64_32 = 10
BPF_LD_IMM64 = 0x18
BPF_CALL = 0x85
PSEUDO_MAP_FD = 1
PSEUDO_MAP_VALUE = 2
PSEUDO_CALL = 1
PSEUDO_FUNC = 4      # src_reg of a ld_imm64 that loads a subprogram's address


@dataclass
class MapSpec:
    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int = 0
    initial: bytes | None = None      # global data sections: the section's bytes
    freeze: bool = False              # .rodata: frozen after its contents are written


@dataclass
class Variable:
    """A global variable inside a global-data map (.rodata/.data/.bss)."""

    name: str
    map_name: str
    offset: int
    size: int


@dataclass
class ProgramSpec:
    name: str
    section: str
    prog_type: int
    attach_type: int
    instructions: bytearray
    # (instruction index, map name, extra offset into the map value or None for PSEUDO_MAP_FD)
    map_relocations: list[tuple[int, str, int | None]] = field(default_factory=list)
    license: str = "GPL"
    # Kernel BTF type id of the attach target (fentry/fexit function, tp_btf typedef); set before loading.
    attach_btf_id: int = 0
    # Its functions appended from .text (instruction index, name), whether it takes the address
    # of one (a bpf_loop callback), and its global functions (name -> count of scalar arguments):
    # with either, it loads with BTF function records (ebpf/func_info.py).
    functions: list[tuple[int, str]] = field(default_factory=list)
    takes_function_address: bool = False
    global_functions: dict[str, int] = field(default_factory=dict)


@dataclass
class CollectionSpec:
    maps: dict[str, MapSpec]
    programs: dict[str, ProgramSpec]
    variables: dict[str, Variable]

    def set_constant(self, name: str, value: int | bytes) -> None:
        """Write a global (e.g. a `const volatile` tunable) before loading."""
        var = self.variables.get(name)
        if var is None:
            raise KeyError(f"no global variable {name!r} in the object")
        spec = self.maps[var.map_name]
        raw = value if isinstance(value, bytes) else int(value).to_bytes(var.size, "little", signed=value < 0)
        if len(raw) > var.size:
            raise ValueError(f"{name}: {len(raw)} bytes do not fit in {var.size}")
        data = bytearray(spec.initial or bytes(spec.value_size))
        data[var.offset:var.offset + len(raw)] = raw
        spec.initial = bytes(data)


_GLOBAL_SECTIONS = (".rodata", ".data", ".bss")


def load_spec(path_or_bytes: str | bytes, map_prefix: str = "") -> CollectionSpec:
    """Read a BPF object. `map_prefix` is prepended to global-data map names."""
    if isinstance(path_or_bytes, bytes):
        data = path_or_bytes
    else:
        with open(path_or_bytes, "rb") as f:
            data = f.read()
    elf = BpfElf(data)
    if ".BTF" not in elf.by_name:
        raise ObjectFormatError("the object has no .BTF section (build it with clang -g)")
    btf = btfmod.Btf(elf.by_name[".BTF"].data)
    license_section = elf.by_name.get("license")
    license = license_section.data.split(b"\0")[0].decode() if license_section else "GPL"

    maps: dict[str, MapSpec] = {}
    variables: dict[str, Variable] = {}
    if ".maps" in elf.by_name:
        maps.update(_btf_maps(btf))
    for section_name in _GLOBAL_SECTIONS:
        section = elf.by_name.get(section_name)
        if section is None or section.size == 0:
            continue
        map_name = (map_prefix + section_name)[-15:]
        maps[section_name] = MapSpec(
            name=map_name, type=MAP_TYPE_ARRAY, key_size=4, value_size=section.size, max_entries=1,
            flags=BPF_F_RDONLY_PROG if section_name == ".rodata" else 0,
            initial=section.data, freeze=section_name == ".rodata")
        for sym in elf.symbols_in(section):
            variables[sym.name] = Variable(sym.name, section_name, sym.value, sym.size)

    text = elf.by_name.get(".text")
    programs: dict[str, ProgramSpec] = {}
    for section in elf.sections:
        kind = section.name.split("/")[0]
        if kind not in PROG_TYPES or not section.size:
            continue
        prog_type, attach_type = PROG_TYPES[kind]
        for sym in elf.symbols_in(section):
            if sym.type != STT_FUNC:
                continue
            programs[sym.name] = _program(elf, btf, section, text, sym.name, sym.value, sym.size,
                                          prog_type, attach_type, license)
    if not programs:
        raise ObjectFormatError("the object holds no program")
    return CollectionSpec(maps, programs, variables)


def _btf_maps(btf: btfmod.Btf) -> dict[str, MapSpec]:
    try:
        datasec = btf.find(".maps", btfmod.KIND_DATASEC)
    except KeyError:
        raise ObjectFormatError(".maps section has no BTF description") from None
    maps = {}
    for var_type, _offset, _size in datasec.extra:
        var = btf.type(var_type)
        definition = btf.resolve(var.size_or_type)
        fields: dict[str, int] = {}
        for member in definition.extra:
            target = btf.resolve(member.type_id)
            if member.name in ("key", "value"):
                if target.kind != btfmod.KIND_PTR:
                    raise ObjectFormatError(f"map {var.name}: {member.name} must be __type()")
                fields[member.name + "_size"] = btf.size_of(target.size_or_type)
            elif target.kind == btfmod.KIND_PTR:   # __uint(name, N) is int (*name)[N]
                array = btf.resolve(target.size_or_type)
                if array.kind != btfmod.KIND_ARRAY:
                    raise ObjectFormatError(f"map {var.name}: unsupported member {member.name}")
                fields[member.name] = array.extra[2]
            else:
                raise ObjectFormatError(f"map {var.name}: unsupported member {member.name}")
        for required in ("type", "max_entries"):
            if required not in fields:
                raise ObjectFormatError(f"map {var.name} has no {required}")
        maps[var.name] = MapSpec(
            name=var.name[:15], type=fields["type"], key_size=fields.get("key_size", 0),
            value_size=fields.get("value_size", 0), max_entries=fields["max_entries"],
            flags=fields.get("map_flags", 0))
    return maps


def _program(elf: BpfElf, btf: btfmod.Btf, section: Section, text: Section | None, name: str, start: int, size: int,
             prog_type: int, attach_type: int, license: str) -> ProgramSpec:
    insns = bytearray(section.data[start:start + size] if size else section.data[start:])
    spec = ProgramSpec(name, section.name, prog_type, attach_type, insns, license=license)
    # .text's functions (bpf-to-bpf calls, bpf_loop callbacks) are appended after the program, each
    # once and only if it is called or its address taken: the verifier refuses code no path reaches
    # (a callback of another program, a step hook this program does not call)
    symbols = [f for f in (elf.symbols_in(text) if text is not None else ()) if f.type == STT_FUNC]
    functions = sorted((f.value // 8, max(1, f.size // 8), f.name) for f in symbols)
    global_names = {f.name for f in symbols if f.bind == STB_GLOBAL}
    appended: dict[int, int] = {}      # a function's first instruction in .text -> in the program
    relocated = {rel.offset for rel in elf.relocations_for(text)} if text is not None else set()

    def text_index(at: int) -> int:
        """The program's index of .text's instruction `at` (its function appended first if need be)."""
        start, count, function = next(((s, n, f) for s, n, f in functions if s <= at < s + n),
                                      (0, len(text.data) // 8, ""))
        if start not in appended:
            appended[start] = len(spec.instructions) // 8
            spec.functions.append((appended[start], function))
            if function in global_names:
                spec.global_functions[function] = _scalar_arguments(btf, function)
            body = text.data[start * 8:(start + count) * 8]
            for i in range(0, len(body), 8):
                # a call to a neighbour by its distance alone would land elsewhere once appended apart
                if body[i] == BPF_CALL and body[i + 1] >> 4 == PSEUDO_CALL and start * 8 + i not in relocated:
                    raise ObjectFormatError(f"{name}: a call inside .text without a relocation")
            spec.instructions += body
            relocate(text, appended[start], start * 8, (start + count) * 8)
        return appended[start] + at - start

    def relocate(target: Section, base_index: int, lo: int, hi: int) -> None:
        for rel in elf.relocations_for(target):
            if not lo <= rel.offset < hi:
                continue
            index = base_index + (rel.offset - lo) // 8
            opcode = spec.instructions[index * 8]
            sym = rel.symbol
            target_section = elf.sections[sym.section_index] if sym.section_index < len(elf.sections) else None
            if target_section is None:
                raise ObjectFormatError(f"{name}: relocation against unknown section")
            if opcode == BPF_LD_IMM64 and target_section.name == ".maps":
                spec.map_relocations.append((index, sym.name, None))
            elif opcode == BPF_LD_IMM64 and target_section.name in _GLOBAL_SECTIONS:
                imm, = struct.unpack_from("<i", spec.instructions, index * 8 + 4)
                extra = imm + (0 if sym.type == STT_SECTION else sym.value)
                spec.map_relocations.append((index, target_section.name, extra))
            elif opcode == BPF_CALL and target_section.name == ".text" and text is not None:
                imm, = struct.unpack_from("<i", spec.instructions, index * 8 + 4)
                callee = text_index((0 if sym.type == STT_SECTION else sym.value // 8) + imm + 1)
                struct.pack_into("<i", spec.instructions, index * 8 + 4, callee - index - 1)
            elif opcode == BPF_LD_IMM64 and target_section.name == ".text" and text is not None:
                # a function's address (a bpf_loop callback): its byte offset in .text becomes the
                # kernel's BPF_PSEUDO_FUNC, an instruction offset from here
                imm, = struct.unpack_from("<i", spec.instructions, index * 8 + 4)
                callee = text_index(((0 if sym.type == STT_SECTION else sym.value) + imm) // 8)
                spec.takes_function_address = True
                regs = spec.instructions[index * 8 + 1]
                spec.instructions[index * 8 + 1] = (regs & 0x0F) | (PSEUDO_FUNC << 4)
                struct.pack_into("<i", spec.instructions, index * 8 + 4, callee - index - 1)
            else:
                raise ObjectFormatError(
                    f"{name}: unsupported relocation (opcode {opcode:#x}) against {sym.name or target_section.name}")

    relocate(section, 0, start, start + len(insns))
    return spec


def _scalar_arguments(btf: btfmod.Btf, function: str) -> int:
    """The number of arguments of a global function, from the object's BTF. The loader describes
    a global function to the verifier as taking that many scalars (ebpf/func_info.py): a pointer
    argument (its memory, the context) would need the object's own types, so it is refused here."""
    try:
        proto = btf.type(btf.find(function, btfmod.KIND_FUNC).size_or_type)
    except KeyError:
        raise ObjectFormatError(f"global function {function} has no BTF type") from None
    scalar = (btfmod.KIND_INT, btfmod.KIND_ENUM)
    for i, (_name, type_id) in enumerate(proto.extra):
        if btf.resolve(type_id).kind not in scalar:
            raise ObjectFormatError(f"global function {function}: argument {i} is not a scalar")
    if not proto.size_or_type or btf.resolve(proto.size_or_type).kind not in scalar:
        raise ObjectFormatError(f"global function {function} does not return a scalar")
    return proto.vlen
