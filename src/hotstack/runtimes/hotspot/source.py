"""HotSpotSource: the Java (HotSpot JVM) frame source (runtimes/registry.py).

A process is a JVM if it maps libjvm.so; its vmStructs, read from its memory once its code cache
and interpreter exist (jvm.py), give the kernel walker (bpf/hotspot.h) the code heaps and the
offsets it needs, and this side the offsets to name a Method. The kernel walks interpreted and
compiled frames and records each with its Method* (and its bytecode pointer or pc: its line). Here
they are named `package.Class.method`, with their source file and line, from the target's memory,
every ~0.5 s for the stacks recorded so far (so a JVM that exits mid-interval keeps its names), and
put in place of the native frames at the same positions.
Frames need the kernel unwinder (`--unwind kernel`): it is what calls the walker.

The lifecycle (detect, attach, observe with retries, poll, collect, merge, forget) is common/jit_source.py's.
"""

from __future__ import annotations

import os

from ... import procs
from ...bpf import schema
from ..common.recorded_stack import stack_records
from ...profile.model import Frame
from ..common.files import UNREAD, Unreadable, UnreadProcess, runs
from ..common.jit_source import JitSource
from .jvm import JvmLayout, NotReady, read_layout
from .names import Names
from .vmstructs import libjvm

# A JVM is looked at again at these ages (seconds since first seen) until its code cache and
# interpreter exist: libjvm is mapped a few ms after exec, the code cache some 10-100 ms later.
RETRY_AGES = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4)


def parse_stack(raw: bytes) -> tuple[list[tuple[int, int, int, int, int, int]], int]:
    """((index, kind, method, extra, pc, blob) per recorded frame, pid) of a struct hs_stack."""
    head, records = stack_records(raw, schema.HS_STACK, schema.HS_FRAME, schema.HS_MAX_FRAMES,
                                  schema.HS_STACK_TAIL_OFFSET)
    frames = [(index, kind, method, extra, pc, blob) for index, kind, pc, method, extra, blob in records]
    return frames, head.pid


def _identity_of(path: str) -> tuple:
    """A libjvm file as one warning is said for: its (device, inode), or its path."""
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except OSError:
        return (path,)


class HotSpotSource(JitSource):
    name = "hotspot"
    label = "Java"
    looks_for = ("/libjvm.so", "/libjli.so")     # (libjvm, _may_run)
    stat_max = schema.HS_STAT_MAX
    stat_frames = schema.HS_STAT_FRAMES
    retry_ages = RETRY_AGES

    def _layout(self, process: procs.Process) -> JvmLayout | None:
        """The layout of the JVM `process` runs (None if none yet); a JVM whose vmStructs this reader
        cannot take is noted once (common/files.py: UNREAD) with what it lacks."""
        pid = process.pid
        found = libjvm(process)
        if found is None:
            return None
        try:
            layout = read_layout(process)
        except NotReady:
            return None
        except Unreadable as e:
            UNREAD.note(_identity_of(found[0]), UnreadProcess(pid, self.label, e.version, found[0], e.reason))
            return None
        if layout is not None:
            self._note_without_lines(pid, found[0], layout)
        return layout

    def _note_without_lines(self, pid: int, path: str, layout: JvmLayout) -> None:
        """A JVM whose frames are named but some of whose lines cannot be had (its vmStructs lack a
        field lines need; JDK 8's compiled loops keep no debug info): said once per libjvm, and
        shown by `hotstack doctor --pid`."""
        if layout.reads_lines and layout.reads_inlining and not layout.loop_lines_missing:
            return
        if not layout.reads_lines:
            what, reason = "lines", layout.lines_missing
        elif not layout.reads_inlining:
            what, reason = "the lines of compiled frames", "its vmStructs lack the fields of an nmethod's scopes"
        else:
            what, reason = "the lines of frames in C2-compiled loops", layout.loop_lines_missing
        UNREAD.note(_identity_of(path), UnreadProcess(pid, self.label, layout.release, path, reason, partial=what))

    def _may_run(self, process: procs.Process) -> bool:
        """A JVM still starting: libjvm mapped (its code cache not made yet), or the java
        launcher's libjli mapped (it dlopens libjvm a few ms after exec)."""
        paths = process.exec_paths(recent=True)
        return "/libjvm.so" in paths or "/libjli.so" in paths or runs(process, "hotspot")

    def _record(self, layout: JvmLayout) -> bytes:
        return layout.record

    def _names(self, process: procs.Process | int, layout: JvmLayout) -> Names:
        return Names(process, layout)

    _parse = staticmethod(parse_stack)
    _stack_head = schema.HS_STACK

    @staticmethod
    def _name_frame(names: Names, frame: tuple) -> Frame | list[Frame] | None:
        index, kind, method, extra, pc, blob = frame
        if kind == schema.HS_KIND_INTERPRETED:
            return names.interpreted(method, extra)
        if kind == schema.HS_KIND_COMPILED:
            return names.compiled(method, extra, blob, pc, leaf=index == 0)
        if kind == schema.HS_KIND_BLOB_FP:
            return names.compiled(method, extra)
        return None

    @staticmethod
    def _identity(frame: tuple) -> tuple:
        index, kind, method, extra, pc, blob = frame
        if kind == schema.HS_KIND_COMPILED:
            return kind, method, extra, blob, pc, index == 0
        return kind, method, extra       # an interpreted frame's extra: the bytecode pointer (its line)


__all__ = ["HotSpotSource", "parse_stack"]
