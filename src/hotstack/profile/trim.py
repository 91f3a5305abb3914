"""Stacks trimmed to the frames that matter, for views that must fit a terminal.

A whole stack is 10-40 frames, most of them the same in every sample: the C runtime's start
(`_start`, `__libc_start_main`), a thread's start (`start_thread`, `clone3`), the kernel's
system-call entry (`entry_SYSCALL_64`, `do_syscall_64`), and in a Python program the
interpreter's own frames between its Python frames. Those are dropped; what is left is cut
to the leaf-most frames plus the outermost one (the program's own entry, e.g. `main`), with a
marker saying how many were left out. Only for display: folded, JSON, pprof keep every frame.
"""

from __future__ import annotations

from .model import Frame, FrameKind

# Frames every stack of their kind shares, by name (prefixes end with '*').
GLUE = ("_start", "__libc_start_main*", "__libc_start_call_main", "start_thread", "clone", "clone3", "__clone*",
        "thread_start", "entry_SYSCALL_64*", "do_syscall_64", "x64_sys_call", "ret_from_fork*")
_EXACT = frozenset(g for g in GLUE if not g.endswith("*"))
_PREFIXES = tuple(g[:-1] for g in GLUE if g.endswith("*"))


def is_glue(frame: Frame) -> bool:
    name = frame.name
    return name in _EXACT or name.startswith(_PREFIXES)


def trim_stack(stack: tuple[Frame, ...], max_lines: int) -> tuple[list[Frame | None], int]:
    """(lines to show, leaf first, None where frames were cut; how many frames are not shown,
    glue included). At most `max_lines` lines, the None line included."""
    kept = [f for f in stack if not is_glue(f)] or list(stack[:1])
    python = next((i for i, f in enumerate(kept) if f.kind is FrameKind.PYTHON), None)
    if python is not None:
        # Past the leaf-most Python frame, the native frames are the interpreter's own loop
        # (_PyEval_EvalFrameDefault, vectorcalls): the Python frames say where the program is.
        kept = kept[:python] + [f for f in kept[python:] if f.kind is FrameKind.PYTHON]
    if len(kept) <= max_lines:
        return list(kept), len(stack) - len(kept)
    # The leaf-most frames, the cut, and the outermost kept frame (the program's own entry).
    head = max(1, max_lines - 2)
    return [*kept[:head], None, kept[-1]], len(stack) - head - 1
