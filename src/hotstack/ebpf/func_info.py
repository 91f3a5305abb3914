"""The BTF function records a program with callbacks or global functions must be loaded with.

A program that passes one of its functions to a helper (bpf_loop), or calls a global function,
must tell the verifier, for each of its functions, where it starts, whether it is static (a
callback must be) and, for a global function, its prototype. The verifier checks a global function
once, on its own, from the argument types of its prototype, where a static one is checked again at
every call with the caller's state. These are func_info records, (instruction offset, BTF FUNC
type id), into a BTF object loaded beside the program. The objects are built without .BTF.ext (it
would embed the build directory), and their .BTF would need the fix-ups a full loader makes before
the kernel takes it, so the few types these records name are written here: int, u64, void *, the
prototypes and one FUNC per function.
"""

from __future__ import annotations

import ctypes
import struct

from . import syscalls as sc

BPF_BTF_LOAD = 18
_MAGIC = 0xEB9F
_KIND_INT, _KIND_PTR, _KIND_FUNC, _KIND_FUNC_PROTO = 1, 2, 12, 13
_LINKAGE_STATIC, _LINKAGE_GLOBAL = 0, 1
_TYPE = struct.Struct("<III")
FUNC_INFO = struct.Struct("<II")      # bpf_func_info: insn_off, type_id


class _Types:
    def __init__(self) -> None:
        self.strings = bytearray(b"\0")
        self.blob = bytearray()
        self.count = 0

    def name(self, text: str) -> int:
        offset = len(self.strings)
        self.strings.extend(text.encode() + b"\0")
        return offset

    def add(self, name: str, info: int, size_or_type: int, extra: bytes = b"") -> int:
        self.blob += _TYPE.pack(self.name(name) if name else 0, info, size_or_type) + extra
        self.count += 1
        return self.count

    def proto(self, returns: int, params: list[tuple[str, int]]) -> int:
        extra = b"".join(struct.pack("<II", self.name(n), t) for n, t in params)
        return self.add("", (_KIND_FUNC_PROTO << 24) | len(params), returns, extra)


def func_btf(main: str, functions: list[tuple[str, int | None]]) -> tuple[bytes, int]:
    """A BTF object with `main` (int main(void *ctx), global) and each of `functions`: None, a
    static `long fn(int, void *)` (a callback; a static function's prototype is not checked), or
    a global function's count of scalar arguments, `int fn(u64, ...)`. Returns the object and the
    type id of main's FUNC; the functions' FUNCs follow it in this order."""
    types = _Types()
    int_type = types.add("int", _KIND_INT << 24, 4, struct.pack("<I", (1 << 24) | 32))   # signed, 32 bits
    u64_type = types.add("unsigned long", _KIND_INT << 24, 8, struct.pack("<I", 64))
    ptr_type = types.add("", _KIND_PTR << 24, 0)                                        # void *
    main_proto = types.proto(int_type, [("ctx", ptr_type)])
    callback_proto = types.proto(int_type, [("index", int_type), ("ctx", ptr_type)])
    global_protos = {n: types.proto(int_type, [(f"arg{i}", u64_type) for i in range(n)])
                     for n in sorted({n for _, n in functions if n is not None})}
    main_id = types.add(main, (_KIND_FUNC << 24) | _LINKAGE_GLOBAL, main_proto)
    for function, args in functions:
        if args is None:
            types.add(function, (_KIND_FUNC << 24) | _LINKAGE_STATIC, callback_proto)
        else:
            types.add(function, (_KIND_FUNC << 24) | _LINKAGE_GLOBAL, global_protos[args])
    header = struct.pack("<HBBIIIII", _MAGIC, 1, 0, 24, 0, len(types.blob), len(types.blob), len(types.strings))
    return header + bytes(types.blob) + bytes(types.strings), main_id


def load_func_btf(blob: bytes, main: str) -> int:
    """A BTF object of func_btf() loaded into the kernel: its descriptor (the caller closes it)."""
    data = ctypes.create_string_buffer(blob, len(blob))
    attr = sc.new_attr()
    struct.pack_into("<QQII", attr, 0, sc.address(data), 0, len(blob), 0)
    return sc.bpf(BPF_BTF_LOAD, attr, f"load the function types of program {main}")


def func_info(starts: list[int], main_id: int) -> bytes:
    """The func_info records of a program whose functions after the first start at these instruction
    indexes (their FUNC types: func_btf's, main's id and on)."""
    records = [FUNC_INFO.pack(0, main_id)]
    records += [FUNC_INFO.pack(index, main_id + 1 + i) for i, index in enumerate(starts)]
    return b"".join(records)
