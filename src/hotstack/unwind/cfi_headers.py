"""The FDE headers of a .eh_frame/.debug_frame section, as arrays: per FDE its record's offset,
its CIE, its pc range and where its instructions lie.

Through .eh_frame_hdr's table when the section has the usual layout (vectorized, no walk), else
by one walk over the records (cfi.records).
"""

from __future__ import annotations

import struct

import numpy as np

from ..symbols.elf import eh_frame_hdr_table
from . import cfi


def fde_headers(data: bytes, section_addr: int, debug_frame: bool, hdr: bytes | None, hdr_addr: int,
                arch: cfi.Arch = cfi.X86_64) -> "FdeHeaders":
    """The section's FDE headers; `hdr`: the .eh_frame_hdr bytes, if any."""
    h = _headers_from_hdr(data, section_addr, hdr, hdr_addr, arch) if hdr and not debug_frame else None
    return h if h is not None else _headers_walked(data, section_addr, debug_frame, arch)


class _FdeLists:
    """The FDEs of one section as lists (one element per FDE, in section order), as the walk finds them."""

    def __init__(self) -> None:
        self.offset: list[int] = []      # record start in the section
        self.cie: list[int] = []         # index into `cies`
        self.pc_begin: list[int] = []
        self.pc_range: list[int] = []
        self.ins_start: list[int] = []
        self.ins_end: list[int] = []
        self.cies: list[cfi._Cie] = []
        self.cie_offsets: list[int] = []


def _walk_headers(data: bytes, section_addr: int, debug_frame: bool, arch: cfi.Arch = cfi.X86_64) -> _FdeLists:
    """One pass over the records: CIEs parsed (few), FDE headers decoded."""
    out = _FdeLists()
    cie_index: dict[int, int] = {}
    u64 = cfi._U64.unpack_from
    size = len(data)
    for start, pos, end, cie_at in cfi.records(data, debug_frame):
        try:
            if cie_at is None:
                if start not in cie_index:
                    cie_index[start] = len(out.cies)
                    out.cies.append(cfi._parse_cie(data, pos, end, section_addr, debug_frame, arch))
                    out.cie_offsets.append(start)
            else:
                c = cie_index.get(cie_at)
                if c is None:
                    if cie_at >= size:
                        continue
                    c = cie_index[cie_at] = len(out.cies)
                    out.cies.append(cfi._parse_cie(data, cfi._cie_body(data, cie_at), cfi._entry_end(data, cie_at),
                                                   section_addr, debug_frame, arch))
                    out.cie_offsets.append(cie_at)
                cie = out.cies[c]
                if debug_frame:
                    pc_begin, p = u64(data, pos)[0], pos + 8
                    pc_range, p = u64(data, p)[0], p + 8
                elif cie.fde_enc == 0x1B:            # pcrel sdata4: what every linker emits
                    pc_begin = (section_addr + pos + struct.unpack_from("<i", data, pos)[0]) & 0xFFFFFFFFFFFFFFFF
                    pc_range, p = struct.unpack_from("<i", data, pos + 4)[0], pos + 8
                else:
                    pc_begin, p = cfi._encoded(data, pos, cie.fde_enc, section_addr)
                    pc_range, p = cfi._encoded(data, p, cie.fde_enc & 0x0F, 0)
                if cie.has_aug_data:
                    aug = data[p]
                    if aug < 0x80:
                        p += 1 + aug
                    else:
                        aug, p = cfi._uleb(data, p)
                        p += aug
                out.offset.append(start)
                out.cie.append(c)
                out.pc_begin.append(pc_begin)
                out.pc_range.append(pc_range)
                out.ins_start.append(p)
                out.ins_end.append(end)
        except (cfi.CfiError, IndexError, struct.error, ValueError):
            pass
    return out


class FdeHeaders:
    """FDE headers as arrays, in section order."""

    def __init__(self, offset, cie, pc_begin, pc_range, ins_start, ins_end, cies, cie_offsets) -> None:
        self.offset, self.cie, self.pc_begin, self.pc_range = offset, cie, pc_begin, pc_range
        self.ins_start, self.ins_end, self.cies, self.cie_offsets = ins_start, ins_end, cies, cie_offsets


def _headers_walked(data: bytes, section_addr: int, debug_frame: bool, arch: cfi.Arch = cfi.X86_64) -> FdeHeaders:
    h = _walk_headers(data, section_addr, debug_frame, arch)
    a = lambda v: np.array(v, np.int64)
    return FdeHeaders(a(h.offset), a(h.cie), np.array(h.pc_begin, np.uint64).astype(np.int64), a(h.pc_range),
                    a(h.ins_start), a(h.ins_end), h.cies, h.cie_offsets)


def _u32_at(b: np.ndarray, o: np.ndarray) -> np.ndarray:
    return (b[o].astype(np.int64) | (b[o + 1].astype(np.int64) << 8) | (b[o + 2].astype(np.int64) << 16)
            | (b[o + 3].astype(np.int64) << 24))


def _s32_at(b: np.ndarray, o: np.ndarray) -> np.ndarray:
    v = _u32_at(b, o)
    return np.where(v >= 1 << 31, v - (1 << 32), v)


def _headers_from_hdr(data: bytes, section_addr: int, hdr: bytes, hdr_addr: int,
                      arch: cfi.Arch = cfi.X86_64) -> FdeHeaders | None:
    """FDE headers through .eh_frame_hdr's table (vectorized); None if the layout is not the usual one
    (then the records are walked instead)."""
    table = eh_frame_hdr_table(hdr)
    if table is None:
        return None
    offset = np.sort(hdr_addr + table[:, 1].astype(np.int64) - section_addr)
    size = len(data)
    if offset[0] < 0 or offset[-1] + 17 > size:
        return None
    b = np.frombuffer(data + bytes(8), np.uint8)
    length = _u32_at(b, offset)
    if (length == 0xFFFFFFFF).any() or (offset + 4 + length > size).any():
        return None
    cie_at = offset + 4 - _u32_at(b, offset + 4)
    uniq, cie = np.unique(cie_at, return_inverse=True)
    cies = []
    for at in uniq.tolist():
        if at < 0 or at + 8 > size or struct.unpack_from("<I", data, at + 4)[0] != 0:
            return None
        try:
            c = cfi._parse_cie(data, cfi._cie_body(data, at), cfi._entry_end(data, at), section_addr, False, arch)
        except (cfi.CfiError, IndexError, struct.error, ValueError):
            return None
        if c.fde_enc != 0x1B or not c.has_aug_data:
            return None
        cies.append(c)
    aug = b[offset + 16].astype(np.int64)
    if (aug >= 0x80).any():
        return None
    pc_begin = section_addr + offset + 8 + _s32_at(b, offset + 8)
    pc_range = _s32_at(b, offset + 12)
    return FdeHeaders(offset, cie.astype(np.int64), pc_begin, pc_range, offset + 17 + aug, offset + 4 + length,
                    cies, uniq.tolist())


def fde_header_end(data: bytes, start: int) -> int:
    """Where the FDE's pc_begin field starts (what cfi._fde expects)."""
    length = cfi._U32.unpack_from(data, start)[0]
    return start + (20 if length == 0xFFFFFFFF else 8)
