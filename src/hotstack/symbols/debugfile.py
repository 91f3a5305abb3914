"""Separate debug files, found the way GDB finds them.

For a file /dir/name with build id `abcdef...` and `.gnu_debuglink` `name.debug`, the paths
are tried in this order, all inside the target's filesystem (`/proc/PID/root`):

  /usr/lib/debug/.build-id/ab/cdef....debug     (accepted only if its build id matches)
  /dir/name.debug                               (accepted only if its CRC32 matches the link)
  /dir/.debug/name.debug
  /usr/lib/debug/dir/name.debug

A debug file is never followed further (its own debuglink is ignored), and a link that points
back at the file itself is skipped, so links cannot loop.
"""

from __future__ import annotations

import os
import posixpath
import zlib

from .elf import ElfError, ElfFile

DEFAULT_DEBUG_DIRS = ("/usr/lib/debug",)
CRC_CHUNK = 1 << 22


def crc32_of(elf: ElfFile) -> int:
    """zlib's CRC32 of the whole file (what `objcopy --add-gnu-debuglink` stores)."""
    crc = 0
    for off in range(0, elf.size, CRC_CHUNK):
        crc = zlib.crc32(elf.view(off, min(CRC_CHUNK, elf.size - off)), crc)
    return crc & 0xFFFFFFFF


def candidate_paths(path: str, build_id: str, debuglink: str | None,
                    debug_dirs: tuple[str, ...] = DEFAULT_DEBUG_DIRS) -> list[tuple[str, str]]:
    """(path inside the target's filesystem, 'build-id' | 'debuglink') in GDB's order."""
    out: list[tuple[str, str]] = []
    if len(build_id) >= 4:
        for root in debug_dirs:
            out.append((f"{root}/.build-id/{build_id[:2]}/{build_id[2:]}.debug", "build-id"))
    if debuglink and "/" not in debuglink and debuglink not in (".", ".."):
        directory = posixpath.dirname(path)
        out.append((posixpath.join(directory, debuglink), "debuglink"))
        out.append((posixpath.join(directory, ".debug", debuglink), "debuglink"))
        for root in debug_dirs:
            out.append((root + posixpath.join(directory, debuglink), "debuglink"))
    return out


def find_debug_file(elf: ElfFile, path: str, root: str = "",
                    debug_dirs: tuple[str, ...] = DEFAULT_DEBUG_DIRS) -> tuple[ElfFile | None, list[str]]:
    """The debug file of `elf` (mapped at `path` in a filesystem rooted at `root`), and the reasons
    candidates were refused (shown in debug info). The caller owns (closes) the returned file."""
    build_id = elf.build_id()
    try:
        link = elf.debuglink()
    except ElfError:
        link = None
    refused: list[str] = []
    for candidate, how in candidate_paths(path, build_id, link[0] if link else None, debug_dirs):
        full = root + candidate if root else candidate
        if not os.path.exists(full):
            continue
        try:
            debug = ElfFile(full)
        except ElfError as e:
            refused.append(str(e))
            continue
        if debug.identity[:2] == elf.identity[:2]:   # same device and inode: a link to itself
            debug.close()
            refused.append(f"{candidate}: is the file itself")
            continue
        if how == "build-id":
            if debug.build_id() != build_id:
                refused.append(f"{candidate}: build id differs")
                debug.close()
                continue
        else:
            crc = crc32_of(debug)
            if crc != link[1]:
                refused.append(f"{candidate}: CRC {crc:08x} does not match the debuglink's {link[1]:08x}")
                debug.close()
                continue
        return debug, refused
    return None, refused
