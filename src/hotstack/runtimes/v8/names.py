"""JSFunction -> Frame, cached per process with an identity check; and the frame's executing line
(positions.py) where its bytecode offset or pc gives one.

A function object's address is only a hint: V8's garbage collector moves objects and reuses
their memory. A cached name is used again only if the function still points at the same
SharedFunctionInfo, and that one still at the same name or scope info (two reads); otherwise the
objects are read anew. If the process is gone, the cached name is kept (a process that exits
mid-interval keeps its names).
"""

from __future__ import annotations

from typing import NamedTuple

from ...profile.model import Frame, FrameKind
from ... import procs
from ..common.memory import MemoryReadError
from .heap import Heap, NotAnObject, Script, is_object, is_smi, read_script, scope_info_name
from .metadata import V8Layout
from .positions import Positions

MAX_ENTRIES = 1 << 16      # per process and kind: beyond this the cache starts again


class Names:
    """The names of one process's functions (a Process, or a live one's pid)."""

    def __init__(self, process: procs.Process | int, layout: V8Layout) -> None:
        self.heap = Heap(procs.as_process(process), layout)
        self.positions = Positions(self.heap, layout.lines) if layout.lines is not None else None
        # a function's frame (its own line), name and script, by its SharedFunctionInfo
        self._functions: dict[int, tuple[int, _Function | None]] = {}
        self._sfis: dict[int, tuple[int, _Function | None]] = {}
        self._scripts: dict[int, Script] = {}
        self.read_errors = 0
        self.named = 0
        self.lines = 0          # frames given the line they execute

    def frame(self, function: int, marker: int) -> Frame | None:
        """The JavaScript frame for the words a V8 frame holds below its frame pointer, with its
        function's line; None for a frame that is not a JavaScript function's (entry, exit, stub
        frames: a Smi marker)."""
        found = self._function(function, marker)
        return found.frame if found is not None else None

    def located(self, function: int, marker: int, pc: int, leaf: bool, array: int, slot: int,
                live: int, stack_top: tuple[int, ...] = ()) -> Frame | None:
        """frame(), with the line the frame executes where its position reads (positions.py):
        else its function's line."""
        found = self._function(function, marker)
        if found is None or self.positions is None or found.script is None:
            return found.frame if found is not None else None
        try:
            position = self.positions.of(function, pc, leaf, array, slot, live, stack_top)
        except (MemoryReadError, NotAnObject):
            self.read_errors += 1
            position = -1
        line = found.script.line(position) if position >= 0 else 0
        if not line:
            return found.frame
        self.lines += 1
        return js_frame(found.name, found.script.name, line)

    def _function(self, function: int, marker: int) -> "_Function | None":
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

    def _sfi_frame(self, sfi: int) -> "_Function | None":
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
        frame = _Function(js_frame(name, script.name if script else "", script.line(position) if script else 0),
                          name, script)
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


class _Function(NamedTuple):
    frame: Frame                # with the function's own line
    name: str
    script: Script | None


def js_frame(name: str, script: str, line: int) -> Frame:
    """`name (script:line)`, as a JavaScript stack trace shows a frame."""
    name = name or "(anonymous)"
    where = f"{script}:{line}" if script and line else script
    return Frame(f"{name} ({where})" if where else name, FrameKind.JS, file=script, line=line)
