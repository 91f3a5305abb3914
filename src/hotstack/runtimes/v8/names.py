"""JSFunction -> Frame, cached per process with an identity check.

A function object's address is only a hint: V8's garbage collector moves objects and reuses
their memory. A cached name is used again only if the function still points at the same
SharedFunctionInfo, and that one still at the same name or scope info (two reads); otherwise the
objects are read anew. If the process is gone, the cached name is kept (a process that exits
mid-interval keeps its names).
"""

from __future__ import annotations

from ...profile.model import Frame, FrameKind
from ... import procs
from ..common.memory import MemoryReadError
from .heap import Heap, NotAnObject, Script, is_object, is_smi, read_script, scope_info_name
from .metadata import V8Layout

MAX_ENTRIES = 1 << 16      # per process and kind: beyond this the cache starts again


class Names:
    """The names of one process's functions (a Process, or a live one's pid)."""

    def __init__(self, process: procs.Process | int, layout: V8Layout) -> None:
        self.heap = Heap(procs.as_process(process), layout)
        self._functions: dict[int, tuple[int, Frame | None]] = {}
        self._sfis: dict[int, tuple[int, Frame | None]] = {}
        self._scripts: dict[int, Script] = {}
        self.read_errors = 0
        self.named = 0

    def frame(self, function: int, marker: int) -> Frame | None:
        """The JavaScript frame for the words a V8 frame holds below its frame pointer; None for
        a frame that is not a JavaScript function's (entry, exit, stub frames: a Smi marker)."""
        if is_smi(marker) or not is_object(function):
            return None
        cached = self._functions.get(function)
        l = self.heap.l
        try:
            sfi = self.heap.field(function, l.function_shared)
            if cached is not None and cached[0] == sfi:
                return cached[1]
            found = self._sfi_frame(sfi) if self.heap.type_of(sfi) == l.type_sfi else None
        except (MemoryReadError, NotAnObject) as e:
            if isinstance(e, MemoryReadError):
                self.read_errors += 1
            return cached[1] if cached is not None else None
        if len(self._functions) >= MAX_ENTRIES:
            self._functions.clear()
        self._functions[function] = (sfi, found)
        if found is not None:
            self.named += 1
        return found

    def _sfi_frame(self, sfi: int) -> Frame | None:
        l = self.heap.l
        name_or_scope = self.heap.field(sfi, l.sfi_name_or_scope)
        cached = self._sfis.get(sfi)
        if cached is not None and cached[0] == name_or_scope:
            return cached[1]
        name, position = "", -1
        if is_object(name_or_scope):
            kind = self.heap.type_of(name_or_scope)
            if kind == l.type_scope_info:
                name, position = scope_info_name(self.heap, name_or_scope)
            elif kind < l.first_nonstring_type:
                name = self.heap.string(name_or_scope)
        script = self._script(self.heap.field(sfi, l.sfi_script))
        frame = js_frame(name, script.name if script else "", script.line(position) if script else 0)
        if len(self._sfis) >= MAX_ENTRIES:
            self._sfis.clear()
        self._sfis[sfi] = (name_or_scope, frame)
        return frame

    def _script(self, tagged: int) -> Script | None:
        if not is_object(tagged):
            return None
        script = self._scripts.get(tagged)
        if script is None:
            if self.heap.type_of(tagged) != self.heap.l.type_script:
                return None
            script = read_script(self.heap, tagged)
            if len(self._scripts) >= 4096:
                self._scripts.clear()
            self._scripts[tagged] = script
        return script


def js_frame(name: str, script: str, line: int) -> Frame:
    """`name (script:line)`, as a JavaScript stack trace shows a frame."""
    name = name or "(anonymous)"
    where = f"{script}:{line}" if script and line else script
    return Frame(f"{name} ({where})" if where else name, FrameKind.JS, file=script, line=line)
