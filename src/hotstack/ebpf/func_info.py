"""The BTF function records a program with callbacks must be loaded with.

A program that passes one of its functions to a helper (bpf_loop) must tell the verifier, for each
of its functions, where it starts and whether it is static (a callback must be): func_info, a list
of (instruction offset, BTF FUNC type id) into a BTF object loaded beside it. The objects are built
without .BTF.ext (it would embed the build directory), and their .BTF would need the fix-ups a
full loader makes before the kernel takes it, so the few types these records name are written here:
int, void *, two prototypes and one FUNC per function.
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
_INT_TYPE, _PTR_TYPE, _MAIN_PROTO, _CALLBACK_PROTO = 1, 2, 3, 4
FUNC_INFO = struct.Struct("<II")      # bpf_func_info: insn_off, type_id


def func_btf(main: str, functions: list[str]) -> bytes:
    """A BTF object with `main` (int main(void *ctx), global) and each of `functions` (long
    fn(int, void *), static) as FUNC types numbered 5, 6, ... in this order."""
    strings = bytearray(b"\0")

    def name(text: str) -> int:
        offset = len(strings)
        strings.extend(text.encode() + b"\0")
        return offset

    types = bytearray()
    types += _TYPE.pack(name("int"), _KIND_INT << 24, 4) + struct.pack("<I", (1 << 24) | 32)   # signed, 32 bits
    types += _TYPE.pack(0, _KIND_PTR << 24, 0)                                                  # void *
    types += _TYPE.pack(0, (_KIND_FUNC_PROTO << 24) | 1, _INT_TYPE) + struct.pack("<II", name("ctx"), _PTR_TYPE)
    types += (_TYPE.pack(0, (_KIND_FUNC_PROTO << 24) | 2, _INT_TYPE)
              + struct.pack("<II", name("index"), _INT_TYPE) + struct.pack("<II", name("ctx"), _PTR_TYPE))
    types += _TYPE.pack(name(main), (_KIND_FUNC << 24) | _LINKAGE_GLOBAL, _MAIN_PROTO)
    for function in functions:
        types += _TYPE.pack(name(function), (_KIND_FUNC << 24) | _LINKAGE_STATIC, _CALLBACK_PROTO)
    header = struct.pack("<HBBIIIII", _MAGIC, 1, 0, 24, 0, len(types), len(types), len(strings))
    return header + bytes(types) + bytes(strings)


def load_func_btf(main: str, functions: list[str]) -> int:
    """The BTF object of func_btf() loaded into the kernel: its descriptor (the caller closes it)."""
    blob = func_btf(main, functions)
    data = ctypes.create_string_buffer(blob, len(blob))
    attr = sc.new_attr()
    struct.pack_into("<QQII", attr, 0, sc.address(data), 0, len(blob), 0)
    return sc.bpf(BPF_BTF_LOAD, attr, f"load the function types of program {main}")


def func_info(functions: list[tuple[int, str]]) -> bytes:
    """The func_info records of a program whose functions after the first start at these instruction
    indexes (their FUNC types: func_btf's 5, 6, ...)."""
    records = [FUNC_INFO.pack(0, 5)]
    records += [FUNC_INFO.pack(index, 6 + i) for i, (index, _name) in enumerate(functions)]
    return b"".join(records)
