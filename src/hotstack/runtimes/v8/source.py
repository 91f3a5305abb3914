"""V8Source: the V8 (Node.js) frame source (runtimes/registry.py).

A process runs V8 if its executable (or a mapped libnode) carries V8's post-mortem metadata;
nothing is read from the process to list it, so it is listed from its first sample. The kernel
half (bpf/v8.h) records JavaScript frames while the in-kernel unwinder walks them; this side
names them from the target's memory (every ~0.5 s for the stacks recorded so far, so a process
that exits mid-interval keeps its names) and puts the names in place of the native frames at
the same positions (the lifecycle shared with HotSpot: common/jit_source.py). Frames need the
kernel unwinder (`--unwind kernel`): it is what walks the JIT code and calls the hook.
"""

from __future__ import annotations

import os
import re

from ... import procs
from ...bpf import schema
from ..common.recorded_stack import stack_records
from ...profile.model import UNKNOWN, Frame
from ..common.files import UNREAD, Unreadable, UnreadProcess, file_marks, runs
from ..common.jit_source import JitSource
from .metadata import V8Layout, checked_binary_layout
from .names import Names

_NODE = re.compile(r"(?:^|/)(?:node(?:js)?\d*|libnode\.so[.\d]*)$")


def parse_stack(raw: bytes) -> tuple[list[tuple], int]:
    """((index, pc, function, marker, bytecode_array, bytecode_offset, live_offset, stack_top) per
    recorded frame, pid) of a struct v8_stack; stack_top: the words at the sample's stack pointer,
    with the leaf frame (index 0) only."""
    head, records = stack_records(raw, schema.V8_STACK, schema.V8_FRAME, schema.V8_MAX_FRAMES,
                                  schema.V8_STACK_TAIL_OFFSET)
    top = (head.leaf_word0, head.leaf_word1, head.leaf_word2, head.leaf_word3)
    frames = []
    for index, *words in records:
        frames.append((index, *words, top if index == 0 else ()))
    return frames, head.pid


def _v8_files(process: procs.Process | int) -> list[tuple[str, str]]:
    """Files of a node process that may hold V8, each as a path that opens the very file it runs
    (Process.exe_file, Process.mapped_file_path), and the path its maps show: the executable, and a
    mapped libnode (Debian's node links it) or any other file that holds V8's metadata. A node
    process is one whose executable is named node* or is node's launcher by what it holds (runs());
    other executables are not looked into: this runs for every new process."""
    process = procs.as_process(process)
    exe = process.exe_path(recent=True)
    launcher = runs(process, "v8")
    if not launcher and not _NODE.search(exe.removesuffix(" (deleted)")):
        return []
    out = [(process.exe_file(), exe)]
    for m in process.exec_maps(recent=True):
        if m.is_file and m.file_path != exe.removesuffix(" (deleted)") and (
                "libnode.so" in m.file_path or (launcher and "v8" in file_marks(process, m)[1])):
            path = process.mapped_file_path(m)
            if path is not None:
                out.append((path, m.file_path))
                break
    return out


def _v8_frame(frame: Frame) -> bool:
    """A native frame that stands for JavaScript: JIT code (no symbol) or a builtin (the
    interpreter's trampolines, the entries from C++ are builtins too but run no JavaScript
    themselves; they are cut with the rest, as the walker cannot tell which JS frames they ran)."""
    return frame.name == UNKNOWN or frame.name.startswith("Builtins_")


class V8Source(JitSource):
    """The V8 (Node.js) frame source. A process first seen before it runs node (a fork that has
    not exec'ed yet) is looked at again on the retry ladder."""

    name = "v8"
    label = "Node.js"
    looks_for = ("node",)         # (_v8_files: a node* executable)
    stat_max = schema.V8_STAT_MAX
    stat_frames = schema.V8_STAT_FRAMES
    _parse = staticmethod(parse_stack)
    _stack_head = schema.V8_STACK
    _runtime_frame = staticmethod(_v8_frame)

    def __init__(self) -> None:
        super().__init__()
        self._layouts: dict[tuple, V8Layout | Unreadable | None] = {}

    def _layout(self, process: procs.Process) -> V8Layout | None:
        """The V8 layout of the node that `process` runs (None if none); a node whose files hold no
        layout this reader takes is noted once (files.UNREAD)."""
        refused: tuple | None = None
        for path, shown in _v8_files(process):
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if key not in self._layouts:
                try:
                    self._layouts[key] = checked_binary_layout(path)
                except Unreadable as e:
                    self._layouts[key] = e
            found = self._layouts[key]
            if isinstance(found, Unreadable):
                refused = (key, shown, found)
            elif found is not None:
                return found
        if refused is not None:
            key, shown, e = refused
            UNREAD.note(key, UnreadProcess(process.pid, "Node.js", "", shown, e.reason))
        return None

    def _may_run(self, process: procs.Process) -> bool:
        """Whether a process without a layout yet may get one later: a `node*` executable (reads
        of this round). Other processes of the host are looked at once."""
        return bool(_v8_files(process))

    def _record(self, layout: V8Layout) -> bytes:
        lines = layout.lines
        return schema.V8_PROC.pack(off_function=layout.fp_function, off_marker=layout.fp_context,
                                   off_bytecode_array=lines.fp_bytecode_array if lines else 0,
                                   off_bytecode_offset=lines.fp_bytecode_offset if lines else 0)

    def _names(self, process: procs.Process | int, layout: V8Layout) -> Names:
        return Names(process, layout)

    @staticmethod
    def _identity(frame: tuple) -> tuple:
        """A frame's name and line depend on all it recorded, and on whether it is the leaf (its pc
        the sampled one, not a return address)."""
        return (frame[0] == 0, *frame[1:])

    @staticmethod
    def _name_frame(names: Names, frame: tuple) -> Frame | None:
        index, pc, function, marker, array, slot, live, top = frame
        return names.located(function, marker, pc, index == 0, array, slot, live, top)


__all__ = ["V8Source", "parse_stack"]
