"""The raw control frames the walker records, what kind each is, and how they split into VM entries.

Each C-level entry into the VM (rb_vm_exec) runs frames until one flagged FINISH: walking leaf
first, a group ends after its FINISH frame, and each group replaces one `rb_vm_exec` native frame.
"""

from __future__ import annotations

from dataclasses import dataclass

MAGIC_MASK = 0x7FFF0001
FRAME_METHOD, FRAME_BLOCK, FRAME_CLASS, FRAME_TOP = 0x11110001, 0x22220001, 0x33330001, 0x44440001
FRAME_CFUNC, FRAME_IFUNC, FRAME_EVAL, FRAME_RESCUE, FRAME_DUMMY = (0x55550001, 0x66660001, 0x77770001,
                                                                    0x88880001, 0x99990001)
FLAG_FINISH = 0x20


@dataclass(frozen=True, slots=True)
class RawRubyFrame:
    iseq: int
    pc: int
    me: int
    flags: int

    @property
    def magic(self) -> int:
        return self.flags & MAGIC_MASK

    @property
    def is_cfunc(self) -> bool:
        return self.magic == FRAME_CFUNC

    @property
    def runs_iseq(self) -> bool:
        """A frame with Ruby code and a position in it (dummy and ifunc frames have neither)."""
        return bool(self.iseq and self.pc) and self.magic not in (FRAME_CFUNC, FRAME_IFUNC, FRAME_DUMMY)

    @property
    def shown(self) -> bool:
        return self.is_cfunc or self.runs_iseq


def vm_groups(frames: list[RawRubyFrame]) -> list[list[RawRubyFrame]]:
    """Leaf-first frames -> leaf-first groups, one per VM entry (frames not shown dropped)."""
    groups: list[list[RawRubyFrame]] = []
    current: list[RawRubyFrame] = []
    for f in frames:
        if f.shown:
            current.append(f)
        if f.flags & FLAG_FINISH:
            if current:
                groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups
