"""Builds Go pc-line tables of every layout (1.2, 1.16, 1.18, 1.20) from a list of functions.

Only the local Go toolchain exists on a test machine, so the older layouts are written here
from their definitions (Go's runtime/symtab.go of each release) to test the reader on them.
"""

from __future__ import annotations

import struct

MAGIC = {"1.2": 0xFFFFFFFB, "1.16": 0xFFFFFFFA, "1.18": 0xFFFFFFF0, "1.20": 0xFFFFFFF1}


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pcvalue(entry: int, steps: list[tuple[int, int]]) -> bytes:
    """steps: (value, pc_end) in pc order; the value holds for pcs below pc_end."""
    out = bytearray()
    value, pc = -1, entry
    for v, end in steps:
        delta = v - value
        out += _uvarint((delta << 1) if delta >= 0 else ((-delta - 1) << 1) | 1)
        out += _uvarint(end - pc)
        value, pc = v, end
    out.append(0)
    return bytes(out)


def build(version: str, funcs: list[dict], text_start: int = 0x401000, end: int | None = None) -> bytes:
    """funcs: dicts of entry, name, file, lines=[(line, pc_end)...] sorted by entry."""
    files = sorted({f["file"] for f in funcs})
    names_blob = bytearray()
    name_off = {}
    for f in funcs:
        name_off[f["name"]] = len(names_blob)
        names_blob += f["name"].encode() + b"\0"
    end = end if end is not None else max(f["lines"][-1][1] for f in funcs)
    nfunc = len(funcs)
    if version == "1.2":
        # header | functab | filetab offset | _func... | names | files | pc streams
        head = struct.pack("<IHBBQ", MAGIC[version], 0, 1, 8, nfunc)
        functab_size = (2 * nfunc + 1) * 8 + 4
        func_size = 8 + 4 * 8
        func_base = len(head) + functab_size
        names_base = func_base + nfunc * func_size
        files_base = names_base + len(names_blob)
        file_strs = bytearray()
        file_off = {}
        for name in files:
            file_off[name] = files_base + len(file_strs)
            file_strs += name.encode() + b"\0"
        filetab_base = files_base + len(file_strs)
        filetab = struct.pack("<I", len(files) + 1) + b"".join(struct.pack("<I", file_off[n]) for n in files)
        pc_base = filetab_base + len(filetab)
        pcs = bytearray()
        funcs_blob = bytearray()
        functab = bytearray()
        for i, f in enumerate(funcs):
            fileno = files.index(f["file"]) + 1
            pcfile = pc_base + len(pcs)
            pcs += pcvalue(f["entry"], [(fileno, f["lines"][-1][1])])
            pcln = pc_base + len(pcs)
            pcs += pcvalue(f["entry"], f["lines"])
            functab += struct.pack("<QQ", f["entry"], func_base + i * func_size)
            funcs_blob += struct.pack("<QiiiIIIII", f["entry"], names_base + name_off[f["name"]], 0, 0, 0,
                                      pcfile, pcln, 0, 0)[:func_size]
        functab += struct.pack("<QI", end, filetab_base)
        return bytes(head + functab + funcs_blob + names_blob + file_strs + filetab + pcs)
    # 1.16+: pcHeader with offsets to separate tables.
    hdr_words = 7 if version == "1.16" else 8
    header_size = 8 + 8 * hdr_words
    file_strs = bytearray()
    file_off = {}
    for name in files:
        file_off[name] = len(file_strs)
        file_strs += name.encode() + b"\0"
    cutab = b"".join(struct.pack("<I", file_off[n]) for n in files)   # one compilation unit
    pcs = bytearray(b"\0")       # offset 0 means "no table"
    streams = []
    for f in funcs:
        fileno = files.index(f["file"])
        pcfile = len(pcs)
        pcs += pcvalue(f["entry"], [(fileno, f["lines"][-1][1])])
        pcln = len(pcs)
        pcs += pcvalue(f["entry"], f["lines"])
        streams.append((pcfile, pcln))
    names_at = header_size
    cu_at = names_at + len(names_blob)
    files_at = cu_at + len(cutab)
    pc_at = files_at + len(file_strs)
    pcln_at = pc_at + len(pcs)
    if version == "1.16":
        entry_fmt, functab_entry = "<Q", "<QQ"
        func_fmt = "<QiiIIIIIIBBBB"
        functab_size = (2 * nfunc + 1) * 8
    else:
        entry_fmt, functab_entry = "<I", "<II"
        func_fmt = "<IiiIIIIIIBBBB" if version == "1.18" else "<IiiIIIIIIiBBBB"
        functab_size = (2 * nfunc + 1) * 4
    func_size = struct.calcsize(func_fmt)
    functab = bytearray()
    funcs_blob = bytearray()
    for i, f in enumerate(funcs):
        entry = f["entry"] if version == "1.16" else f["entry"] - text_start
        functab += struct.pack(functab_entry, entry, functab_size + i * func_size)
        pcfile, pcln = streams[i]
        fields = [entry, name_off[f["name"]], 0, 0, 0, pcfile, pcln, 0, 0]
        if version == "1.20":
            fields.append(f["lines"][0][0])
        fields += [0, 0, 0, 0]
        funcs_blob += struct.pack(func_fmt, *fields)
    functab += struct.pack(entry_fmt, end if version == "1.16" else end - text_start)
    words = [nfunc, len(files)]
    if version != "1.16":
        words.append(text_start)
    words += [names_at, cu_at, files_at, pc_at, pcln_at]
    head = struct.pack("<IHBB", MAGIC[version], 0, 1, 8) + b"".join(struct.pack("<Q", w) for w in words)
    assert len(head) == header_size
    return bytes(head + names_blob + cutab + file_strs + pcs + functab + funcs_blob)
