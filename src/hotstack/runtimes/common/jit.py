"""JIT code of an interpreter (Ruby's YJIT, PHP's opcache JIT) in a native stack.

Both JITs keep the interpreter's frames (Ruby's control frames, PHP's execute_data), so the frames
the walker records are named as without the JIT; the line is the one the JIT code last stored
(it stores the position before calls, not at each instruction). What changes is the native stack:
JIT code has no unwind table, the unwinder stops in it or soon after, and the interpreter's entry
frames (rb_vm_exec, execute_ex) below it are never reached, so the native frames met past the JIT
code cannot be put between the right interpreter frames. Such a stack keeps its native frames up to
the first JIT frame, which becomes one marker (`[ruby jit]`, `[php jit]`); every interpreter frame
goes above it, in order. Nothing is placed where it did not run.

JIT code lives in anonymous executable memory: YJIT's code region (private), opcache's JIT buffer
(inside its shared memory, `/dev/zero (deleted)`).
"""

from __future__ import annotations

import time

from ... import procs
from ...procs.maps import Mapping, parse_maps
from ...profile.model import UNKNOWN, Frame, FrameKind
from .merge import merge

_SPECIAL = ("[vdso]", "[vsyscall]", "[vvar]")
_SHARED_ANON = ("/dev/zero", "/SYSV00000000")      # MAP_SHARED|MAP_ANONYMOUS, System V shared memory


def jit_regions(mappings: list[Mapping]) -> tuple[Mapping, ...]:
    """The anonymous executable mappings of a process: where JIT code runs."""
    return tuple(m for m in mappings if m.executable and m.path not in _SPECIAL
                 and (not m.is_file or m.file_path in _SHARED_ANON or m.path.startswith("/memfd:")))


def in_regions(frame: Frame, regions: tuple[Mapping, ...]) -> bool:
    """A native frame the symbolizer could not name, inside one of `regions` (an anonymous mapping's
    frame carries its address; a shared one's, as any file's, its offset in the file)."""
    if frame.name != UNKNOWN or frame.kind is not FrameKind.NATIVE:
        return False
    for m in regions:
        if m.is_file:
            if frame.module == m.file_path and m.offset <= frame.address < m.offset + (m.end - m.start):
                return True
        elif m.start <= frame.address < m.end:
            return True
    return False


def merge_jit(native: list[Frame], groups: list[list[Frame]], truncated: bool,
              regions: tuple[tuple[int, int], ...], marker: Frame) -> list[Frame] | None:
    """The merged stack of a sample whose native frames run through JIT code; None if none of them
    does (the caller merges as usual). The native frames kept (those before the JIT code) are never
    anchors, even an interpreter entry among them (JIT code that called into the interpreter). Which
    of the walker's frames that entry ran cannot be told, and putting them all there would put every
    frame under YJIT, <main> included, below the JIT marker: so every interpreter frame goes above
    the marker."""
    cut = next((i for i, f in enumerate(native) if in_regions(f, regions)), None)
    if cut is None:
        return None
    return merge([*native[:cut], marker], groups, truncated, is_anchor=_no_anchor)


def _no_anchor(frame: Frame) -> bool:
    return False


class JitWatch:
    """One process's JIT regions, looked for again (at most every RESCAN seconds) when a stack meets
    anonymous memory that is none of the known ones: a JIT may map its code after the process was
    first seen."""

    RESCAN = 1.0

    def __init__(self, process: procs.Process | int, regions: tuple[Mapping, ...] = ()) -> None:
        self.process = procs.as_process(process)
        self.regions = regions
        self._checked = time.monotonic()

    def regions_for(self, native: list[Frame]) -> tuple[Mapping, ...]:
        if any(f.name == UNKNOWN and f.kind is FrameKind.NATIVE and not in_regions(f, self.regions)
               and (not f.module or f.module.startswith(_SHARED_ANON)) for f in native):
            now = time.monotonic()
            if now - self._checked >= self.RESCAN:
                self._checked = now
                text = self.process.maps_text()
                if text:        # '' once the process is gone: keep what was known
                    self.regions = jit_regions(parse_maps(text))
        return self.regions
