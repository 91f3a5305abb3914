"""BTF (BPF Type Format) reader.

Two uses: the `.maps` section of our own objects (map definitions are encoded
as BTF struct members) and the kernel's `/sys/kernel/btf/vmlinux`, from which
callers compute struct member offsets instead of relying on CO-RE relocations.
"""

from __future__ import annotations

import os
import struct
import threading
from array import array
from dataclasses import dataclass

import numpy as np

from .. import cache_files
from ..content_hash import blake2b
from .errors import ObjectFormatError

BTF_MAGIC = 0xEB9F

KIND_INT, KIND_PTR, KIND_ARRAY, KIND_STRUCT, KIND_UNION, KIND_ENUM, KIND_FWD = 1, 2, 3, 4, 5, 6, 7
KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_FUNC, KIND_FUNC_PROTO = 8, 9, 10, 11, 12, 13
KIND_VAR, KIND_DATASEC, KIND_FLOAT, KIND_DECL_TAG, KIND_TYPE_TAG, KIND_ENUM64 = 14, 15, 16, 17, 18, 19

_MODIFIERS = {KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_TYPE_TAG}
# Bytes that follow a type's 12-byte header: fixed per kind, or per vlen entry.
_FIXED_BYTES = {KIND_INT: 4, KIND_VAR: 4, KIND_DECL_TAG: 4, KIND_ARRAY: 12}
_ENTRY_BYTES = {KIND_STRUCT: 12, KIND_UNION: 12, KIND_ENUM: 8, KIND_ENUM64: 12, KIND_FUNC_PROTO: 8, KIND_DATASEC: 12}
_KINDS = {KIND_PTR, KIND_FWD, KIND_FUNC, KIND_FLOAT} | _MODIFIERS | set(_FIXED_BYTES) | set(_ENTRY_BYTES)


def _type_bytes(info: int) -> int:
    """The length of a type in the type section, from the `info` word of its header."""
    kind = (info >> 24) & 0x1F
    if kind not in _KINDS:
        raise ObjectFormatError(f"unknown BTF kind {kind}")
    return 12 + _FIXED_BYTES.get(kind, 0) + _ENTRY_BYTES.get(kind, 0) * (info & 0xFFFF)


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
    """Types are indexed in one quick pass and decoded only when asked for.

    The kernel's BTF has ~130k types; decoding every member of every struct up front
    took seconds in Python, while a profiler needs a handful of offsets.
    """

    def __init__(self, data: bytes, cache_dir: str | None = None) -> None:
        if len(data) < 24:
            raise ObjectFormatError("BTF blob too short")
        magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
        if magic != BTF_MAGIC:
            raise ObjectFormatError("bad BTF magic (big-endian BTF is not supported)")
        type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", data, 8)
        # One copy of the data: the type section and the string table are read in place, by
        # their offsets (slices of the kernel's 5.5 MB blob cost as much again while it was held).
        self._data = data
        self._types_at, self._types_end = hdr_len + type_off, hdr_len + type_off + type_len
        self._strings_at, self._strings_end = hdr_len + str_off, hdr_len + str_off + str_len
        if self._types_end > len(data) or self._strings_end > len(data):
            raise ObjectFormatError("BTF sections run past the blob")
        # type id -> offset of its btf_type in the blob, and of its name in the string table (id 0:
        # void). Compact arrays: the kernel's BTF has ~130k types, and lists of ints cost 10x more.
        self._offsets = array("I", [0])
        self._name_offsets = array("I", [0])
        self._decoded: dict[int, BtfType] = {}
        self._by_name: dict[int, list[int]] | None = None   # name offset -> type ids, built on first find
        if not self._load_index(cache_dir):
            self._index()
            self._save_index(cache_dir)

    @classmethod
    def from_file(cls, path: str, cache_dir: str | None = None) -> "Btf":
        with open(path, "rb") as f:
            return cls(f.read(), cache_dir)

    # The index of the kernel's BTF (a Python pass over ~130k types, a quarter of a second) is the
    # same at every start until the kernel changes: kept on disk, keyed by the blob's hash.
    def _index_path(self, cache_dir: str | None) -> str | None:
        if not cache_dir:
            return None
        view = memoryview(self._data)
        digest = blake2b(view[self._types_at:self._types_end], digest_size=16)
        digest.update(view[self._strings_at:self._strings_end])
        return os.path.join(cache_dir, f"btf-index-{digest.hexdigest()}")

    def _load_index(self, cache_dir: str | None) -> bool:
        path = self._index_path(cache_dir)
        if path is None:
            return False
        type_len = self._types_end - self._types_at
        # two arrays of one uint32 per type and void, each type at least 12 bytes: a file of any
        # other size is not read (a damaged or sparse one may claim gigabytes)
        most = 8 * (type_len // 12 + 1)

        def misfit(size: int, _header: bytes) -> str:
            return "" if size % 8 == 0 and 8 <= size <= most else f"is {size} bytes, not an index of this BTF"
        raw = cache_files.read(path, misfit)
        if raw is None:
            return False
        half = len(raw) // 2
        offsets, names = array("I"), array("I")
        offsets.frombytes(raw[:half])
        names.frombytes(raw[half:])
        # every entry must point at a type whose name is the one recorded
        words = np.frombuffer(self._data, np.uint32, type_len // 4, self._types_at)
        at = np.frombuffer(offsets, np.uint32)[1:]      # (no wider copy: it would stay in the heap)
        if (offsets[0] != 0 or type_len % 4 or type_len < 12 or (at & 3).any() or (at > type_len - 12).any()
                or not self._ends_at_last_type(offsets)
                or not np.array_equal(words[at // 4], np.frombuffer(names, np.uint32)[1:])):
            cache_files.discard(path, "does not index this BTF")
            return False
        self._offsets, self._name_offsets = offsets, names
        return True

    def _save_index(self, cache_dir: str | None) -> None:
        path = self._index_path(cache_dir)
        if path is not None:     # (not saved, e.g. a read-only home: indexed again next time)
            cache_files.write(path, (self._offsets.tobytes(), self._name_offsets.tobytes()))

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _string(self, off: int) -> str:
        start = self._strings_at + off
        end = self._data.find(b"\0", start, self._strings_end)
        return self._data[start:end if end >= 0 else self._strings_end].decode("utf-8", "replace")

    def _index(self) -> None:
        blob, base, end = self._data, self._types_at, self._types_end
        unpack = struct.unpack_from
        offsets, names = self._offsets, self._name_offsets
        off = base
        while off + 12 <= end:
            name_off, info = unpack("<II", blob, off)
            offsets.append(off - base)
            names.append(name_off)
            off += _type_bytes(info)
        if off != end:
            raise ObjectFormatError("BTF type section is truncated")

    def _ends_at_last_type(self, offsets: array) -> bool:
        """Whether the type at the last of `offsets` ends the type section (an index cut short
        does not)."""
        if len(offsets) == 1:       # void alone
            return self._types_end == self._types_at
        at = self._types_at + offsets[-1]
        if at + 12 > self._types_end:
            return False
        try:
            return at + _type_bytes(struct.unpack_from("<I", self._data, at + 4)[0]) == self._types_end
        except ObjectFormatError:
            return False

    def _decode(self, type_id: int) -> BtfType:
        blob, off = self._data, self._types_at + self._offsets[type_id]
        unpack = struct.unpack_from
        name_off, info, size_or_type = unpack("<III", blob, off)
        off += 12
        kind = (info >> 24) & 0x1F
        vlen = info & 0xFFFF
        kind_flag = bool(info >> 31)
        extra: tuple = ()
        if kind in (KIND_INT, KIND_VAR, KIND_DECL_TAG):
            extra = unpack("<I", blob, off)
        elif kind == KIND_ARRAY:
            extra = unpack("<III", blob, off)
        elif kind in (KIND_STRUCT, KIND_UNION):
            members = []
            for i in range(vlen):
                m_name, m_type, m_off = unpack("<III", blob, off + 12 * i)
                if kind_flag:
                    m_off &= 0xFFFFFF  # high 8 bits are the bitfield size
                members.append(Member(self._string(m_name), m_type, m_off))
            extra = tuple(members)
        elif kind == KIND_ENUM:
            extra = tuple(unpack("<Ii", blob, off + 8 * i) for i in range(vlen))
        elif kind == KIND_FUNC_PROTO:     # the parameters: (name offset, type)
            extra = tuple(unpack("<II", blob, off + 8 * i) for i in range(vlen))
        elif kind == KIND_DATASEC:
            extra = tuple(unpack("<III", blob, off + 12 * i) for i in range(vlen))
        return BtfType(type_id, kind, self._string(name_off), size_or_type, vlen, kind_flag, extra)

    @property
    def types(self) -> list[BtfType | None]:
        """Every type, decoded (slow on the kernel's BTF: prefer type() and find())."""
        return [None] + [self.type(i) for i in range(1, len(self._offsets))]

    def type(self, type_id: int) -> BtfType:
        if type_id <= 0 or type_id >= len(self._offsets):
            raise ObjectFormatError(f"BTF type {type_id} does not exist")
        t = self._decoded.get(type_id)
        if t is None:
            t = self._decoded[type_id] = self._decode(type_id)
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
            self._by_name = {}
        needle = b"\0" + name.encode() + b"\0"
        data, base, end = self._data, self._strings_at, self._strings_end
        pos = data.find(needle, base, end)
        while pos >= 0:
            name_off = pos + 1 - base
            ids = self._by_name.get(name_off)
            if ids is None:
                # Types named by this string-table offset: one scan of the compact index (numpy:
                # a Python scan of the kernel's ~130k names took 50 ms per name at start-up).
                names = np.frombuffer(self._name_offsets, np.uint32)
                ids = self._by_name[name_off] = np.flatnonzero(names == name_off).tolist()
            for type_id in ids:
                t = self.type(type_id)
                if kind is None or t.kind == kind:
                    return t
            pos = data.find(needle, pos + 1, end)
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


def default_cache_dir() -> str:
    """$HOTSTACK_BTF_CACHE ('' disables), else $XDG_CACHE_HOME/hotstack/btf or ~/.cache/..."""
    return cache_files.directory("btf", "HOTSTACK_BTF_CACHE")


_kernel: dict[str, Btf] = {}
_kernel_lock = threading.Lock()


def kernel_btf(path: str = "/sys/kernel/btf/vmlinux") -> Btf:
    """The running kernel's BTF (parsed once; its type index cached on disk), kept until
    release_kernel_btf()."""
    with _kernel_lock:
        btf = _kernel.get(path)
        if btf is None:
            btf = _kernel[path] = Btf.from_file(path, default_cache_dir())
        return btf


def release_kernel_btf() -> None:
    """Forget the kernel's BTF: its 5.5 MB are needed while programs are prepared, not while
    they run. A later kernel_btf() reads it again (10-20 ms with its index on disk)."""
    with _kernel_lock:
        _kernel.clear()
