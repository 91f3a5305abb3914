"""How recorded PHP frames split into calls of the VM (no process needed)."""

from __future__ import annotations

from hotstack.runtimes.php.source import CALL_TOP, RawPhpFrame, vm_groups


def test_groups_end_after_each_top_frame():
    # leaf first: closure (entered from array_map: TOP) <- array_map (internal) <- run <- {main} (TOP)
    frames = [RawPhpFrame(1, 0x10, 7, CALL_TOP), RawPhpFrame(2, 0, 7, 0), RawPhpFrame(3, 0x20, 7, 0),
              RawPhpFrame(4, 0x30, 7, CALL_TOP | 0x10000)]
    assert [[f.func for f in g] for g in vm_groups(frames)] == [[1], [2, 3, 4]]


def test_frames_without_a_function_are_dropped_but_still_end_a_group():
    frames = [RawPhpFrame(1, 0x10, 7, 0), RawPhpFrame(0, 0, 7, CALL_TOP), RawPhpFrame(2, 0x20, 7, CALL_TOP)]
    assert [[f.func for f in g] for g in vm_groups(frames)] == [[1], [2]]
