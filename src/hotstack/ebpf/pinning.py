"""Pinned objects: maps that live in a BPF filesystem and are shared between programs of
different processes (e.g. a map one tool writes and another reads at sample time)."""

from __future__ import annotations

import ctypes
import os
import struct

from . import syscalls as sc
from .maps import Map
from .spec import MapSpec

_MAP_INFO_SIZE = 88   # struct bpf_map_info up to map_extra; older kernels fill less


def open_pinned_map(path: str) -> Map:
    """The map pinned at `path` (BPF_OBJ_GET), described by the kernel (BPF_OBJ_GET_INFO_BY_FD).

    Raises SyscallError (errno ENOENT if nothing is pinned there).
    """
    path_buf = ctypes.create_string_buffer(os.fsencode(path))
    attr = sc.new_attr()
    struct.pack_into("<Q", attr, 0, sc.address(path_buf))
    fd = sc.bpf(sc.BPF_OBJ_GET, attr, f"open pinned map {path}")
    try:
        info = ctypes.create_string_buffer(_MAP_INFO_SIZE)
        attr = sc.new_attr()
        struct.pack_into("<IIQ", attr, 0, fd, len(info), sc.address(info))
        sc.bpf(sc.BPF_OBJ_GET_INFO_BY_FD, attr, f"info of pinned map {path}")
        map_type, _id, key_size, value_size, max_entries, flags = struct.unpack_from("<IIIIII", info, 0)
        name = info.raw[24:40].split(b"\0", 1)[0].decode("utf-8", "replace")
    except BaseException:
        sc.close(fd)
        raise
    return Map(MapSpec(name or os.path.basename(path)[:15], map_type, key_size, value_size, max_entries, flags), fd)


def pin(fd: int, path: str) -> None:
    """Pin a map or program fd at `path` in a BPF filesystem (BPF_OBJ_PIN)."""
    path_buf = ctypes.create_string_buffer(os.fsencode(path))
    attr = sc.new_attr()
    struct.pack_into("<QI", attr, 0, sc.address(path_buf), fd)
    sc.bpf(sc.BPF_OBJ_PIN, attr, f"pin at {path}")
