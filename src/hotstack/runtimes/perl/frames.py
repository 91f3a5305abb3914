"""From the context stack the walker recorded (bpf/perl.h) to Perl frames, and how they split into
calls of the runloop.

Entries are innermost first. A sub (CXt_SUB, CXt_FORMAT) or eval (CXt_EVAL) entry is a frame; loop
and block entries are not. The innermost frame is at PL_curcop; each frame entry's blk_oldcop is
the statement of the frame below it (where the call was made), so what is left after the last one
is the main program's statement: a `<main>` frame, unless the walk was cut short.

Perl runs nested Perl subs in one C call of its runloop; C code calling back into Perl (call_sv:
BEGIN blocks, sort subs, DESTROY, tie, XS callbacks) runs another. Walking leaf first, a group
ends after a frame entered from C (its return op is NULL; the main program's frame too) or where
an inner runloop's own stack ends (a `runlevel` entry). Each group replaces one
`Perl_runops_standard` native frame.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...bpf import schema
from ..common.recorded_stack import stack_records

# cop.h, the same in 5.24-5.40: the context type in cx_type's low 4 bits
CXTYPEMASK = 0xF
CXT_SUB, CXT_FORMAT, CXT_EVAL = 9, 10, 11
_FRAME_TYPES = (CXT_SUB, CXT_FORMAT, CXT_EVAL)


@dataclass(frozen=True, slots=True)
class RawContext:
    cv: int
    oldcop: int
    retop: int
    type: int
    runlevel: int


@dataclass(frozen=True, slots=True)
class RawPerlFrame:
    kind: str           # "sub", "eval" or "main"
    cv: int             # the sub's CV ("sub" only)
    cop: int            # the statement the frame is at
    top: bool           # entered from C: the first frame of a runloop call


def parse_stack(raw: bytes) -> tuple[list[RawPerlFrame], bool, int]:
    """(frames leaf first, truncated, first pid) of a struct perl_stack."""
    head, records = stack_records(raw, schema.PERL_STACK, schema.PERL_CONTEXT, schema.PERL_MAX_CONTEXTS,
                                  schema.PERL_STACK_TAIL_OFFSET)
    contexts = [RawContext(*r) for r in records]
    return frames_of(contexts, head.curcop, bool(head.truncated)), bool(head.truncated), head.pid


def frames_of(contexts: list[RawContext], curcop: int, truncated: bool) -> list[RawPerlFrame]:
    """Frames leaf first; a runloop's stack boundary is a frame-less marker (kind "runlevel")."""
    frames: list[RawPerlFrame] = []
    cop = curcop
    innermost = True
    for c in contexts:
        if c.runlevel:
            frames.append(RawPerlFrame("runlevel", 0, 0, True))
            continue
        t = c.type & CXTYPEMASK
        if t not in _FRAME_TYPES:
            continue        # a loop or a block inside a frame
        kind = "eval" if t == CXT_EVAL else "sub"
        # PL_curcop still the statement that entered this frame: the frame has run no statement of
        # its own yet (pushed by entersub, its first nextstate to come), or is being left (popblock
        # restored PL_curcop before the context is popped). Its statement is unknown: the caller's
        # line would be a line outside the sub (cop 0: no line).
        at = 0 if innermost and cop == c.oldcop else cop
        innermost = False
        frames.append(RawPerlFrame(kind, c.cv if kind == "sub" else 0, at, c.retop == 0))
        cop = c.oldcop
    if not truncated:
        frames.append(RawPerlFrame("main", 0, cop, True))
    return frames


def vm_groups(frames: list[RawPerlFrame]) -> list[list[RawPerlFrame]]:
    """Leaf-first frames -> leaf-first groups, one per runloop call (markers dropped)."""
    groups: list[list[RawPerlFrame]] = []
    current: list[RawPerlFrame] = []
    for f in frames:
        if f.kind != "runlevel":
            current.append(f)
        if f.top and current:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups
