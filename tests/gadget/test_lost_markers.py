"""A stack the kernel could not store is marked on its own side: a lost kernel stack in the kernel
fields, a lost user stack in the user fields (CI once saw `[lost kernel stack]` in
user_stack_raw.symbols of a --kernel-stacks-only run, on a loaded host where the kernel stack map
had a collision)."""

from __future__ import annotations

from hotstack.gadget.profile_cpu import kernel_frames, user_frames
from hotstack.profile.model import LOST_KERNEL, LOST_USER
from hotstack.sampling.buffers import RawStack
from hotstack.sampling.samples import SampleMaker


def _sample(**lost):
    # pid 0 and no addresses: nothing to symbolize, so no symbolizer or process table is asked
    raw = RawStack(0, 0, "dd", (), (), 3, **lost)
    sample, _ = SampleMaker(None, None, []).sample(raw, strip_bpf=True)
    return sample


def test_a_lost_kernel_stack_is_a_kernel_frame():
    s = _sample(kernel_stack_lost=True)
    assert kernel_frames(s) == [LOST_KERNEL]
    assert user_frames(s) == []


def test_a_lost_user_stack_is_a_user_frame():
    s = _sample(user_stack_lost=True)
    assert user_frames(s) == [LOST_USER]
    assert kernel_frames(s) == []
