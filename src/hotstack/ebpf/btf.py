"""BTF (BPF Type Format) reader.

Two uses: the `.maps` section of our own objects (map definitions are encoded
as BTF struct members) and the kernel's `/sys/kernel/btf/vmlinux`, from which
callers compute struct member offsets instead of relying on CO-RE relocations.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from .errors import ObjectFormatError

BTF_MAGIC = 0xEB9F

KIND_INT, KIND_PTR, KIND_ARRAY, KIND_STRUCT, KIND_UNION, KIND_ENUM, KIND_FWD = 1, 2, 3, 4, 5, 6, 7
KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_FUNC, KIND_FUNC_PROTO = 8, 9, 10, 11, 12, 13
KIND_VAR, KIND_DATASEC, KIND_FLOAT, KIND_DECL_TAG, KIND_TYPE_TAG, KIND_ENUM64 = 14, 15, 16, 17, 18, 19

_MODIFIERS = {KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_TYPE_TAG}


@dataclass(frozen=True)
class Member:
    name: str
    type_id: int
    bit_offset: int


@dataclass(frozen=True)
class BtfType:
    id: int
    kind: int
    name: str
    size_or_type: int   # size for INT/STRUCT/UNION/ENUM/DATASEC, referenced type otherwise
    vlen: int
    kind_flag: bool
    extra: tuple        # kind-specific: members, (elem, index, nelems), (type, offset, size) vars ...


class Btf:
    def __init__(self, data: bytes) -> None:
        if len(data) < 24:
            raise ObjectFormatError("BTF blob too short")
        magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
        if magic != BTF_MAGIC:
            raise ObjectFormatError("bad BTF magic (big-endian BTF is not supported)")
        type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", data, 8)
        types = data[hdr_len + type_off: hdr_len + type_off + type_len]
        self._strings = data[hdr_len + str_off: hdr_len + str_off + str_len]
        self.types: list[BtfType | None] = [None]  # type id 0 is void
        self._by_name: dict[str, list[int]] | None = None
        self._parse(types)

    @classmethod
    def from_file(cls, path: str) -> "Btf":
        with open(path, "rb") as f:
            return cls(f.read())

    def _string(self, off: int) -> str:
        end = self._strings.find(b"\0", off)
        return self._strings[off:end].decode("utf-8", "replace")

    def _parse(self, blob: bytes) -> None:
        off, n = 0, len(blob)
        unpack = struct.unpack_from
        while off + 12 <= n:
            name_off, info, size_or_type = unpack("<III", blob, off)
            off += 12
            kind = (info >> 24) & 0x1F
            vlen = info & 0xFFFF
            kind_flag = bool(info >> 31)
            extra: tuple = ()
            if kind == KIND_INT or kind == KIND_VAR or kind == KIND_DECL_TAG:
                extra = unpack("<I", blob, off)
                off += 4
            elif kind == KIND_ARRAY:
                extra = unpack("<III", blob, off)
                off += 12
            elif kind in (KIND_STRUCT, KIND_UNION):
                members = []
                for _ in range(vlen):
                    m_name, m_type, m_off = unpack("<III", blob, off)
                    off += 12
                    if kind_flag:
                        m_off &= 0xFFFFFF  # high 8 bits are the bitfield size
                    members.append(Member(self._string(m_name), m_type, m_off))
                extra = tuple(members)
            elif kind == KIND_ENUM:
                extra = tuple(unpack("<Ii", blob, off + 8 * i) for i in range(vlen))
                off += 8 * vlen
            elif kind == KIND_ENUM64:
                off += 12 * vlen
            elif kind == KIND_FUNC_PROTO:
                off += 8 * vlen
            elif kind == KIND_DATASEC:
                extra = tuple(unpack("<III", blob, off + 12 * i) for i in range(vlen))
                off += 12 * vlen
            elif kind not in (KIND_PTR, KIND_FWD, KIND_FUNC, KIND_FLOAT) and kind not in _MODIFIERS:
                raise ObjectFormatError(f"unknown BTF kind {kind}")
            self.types.append(BtfType(len(self.types), kind, self._string(name_off), size_or_type,
                                      vlen, kind_flag, extra))

    def type(self, type_id: int) -> BtfType:
        t = self.types[type_id]
        if t is None:
            raise ObjectFormatError("BTF type 0 (void) has no definition")
        return t

    def resolve(self, type_id: int) -> BtfType:
        """Skip typedefs and qualifiers."""
        t = self.type(type_id)
        while t.kind in _MODIFIERS:
            t = self.type(t.size_or_type)
        return t

    def size_of(self, type_id: int) -> int:
        t = self.resolve(type_id)
        if t.kind in (KIND_INT, KIND_STRUCT, KIND_UNION, KIND_ENUM, KIND_ENUM64, KIND_FLOAT, KIND_DATASEC):
            return t.size_or_type
        if t.kind == KIND_PTR:
            return 8
        if t.kind == KIND_ARRAY:
            elem, _index, nelems = t.extra
            return self.size_of(elem) * nelems
        raise ObjectFormatError(f"BTF type {type_id} ({t.name or 'anonymous'}) has no size")

    def find(self, name: str, kind: int | None = None) -> BtfType:
        if self._by_name is None:
            index: dict[str, list[int]] = {}
            for t in self.types[1:]:
                if t is not None and t.name:
                    index.setdefault(t.name, []).append(t.id)
            self._by_name = index
        for type_id in self._by_name.get(name, ()):
            t = self.type(type_id)
            if kind is None or t.kind == kind:
                return t
        raise KeyError(name)

    def member_offset(self, struct_name: str, path: str) -> int:
        """Byte offset of a (dotted, possibly nested) member: `task_struct`, `thread.fsbase`."""
        t = self.find(struct_name, KIND_STRUCT)
        total = 0
        for part in path.split("."):
            found = _find_member(self, t, part)
            if found is None:
                raise KeyError(f"{struct_name}.{path}")
            bit_offset, member = found
            total += bit_offset
            t = self.resolve(member.type_id)
        if total % 8:
            raise KeyError(f"{struct_name}.{path} is a bitfield")
        return total // 8


def _find_member(btf: Btf, t: BtfType, name: str) -> tuple[int, Member] | None:
    for member in t.extra:
        if member.name == name:
            return member.bit_offset, member
        if not member.name:  # anonymous struct/union: search inside
            inner = btf.resolve(member.type_id)
            if inner.kind in (KIND_STRUCT, KIND_UNION):
                found = _find_member(btf, inner, name)
                if found is not None:
                    return member.bit_offset + found[0], found[1]
    return None


@lru_cache(maxsize=1)
def kernel_btf(path: str = "/sys/kernel/btf/vmlinux") -> Btf:
    """The running kernel's BTF (parsed once; ~0.5 s)."""
    return Btf.from_file(path)
