"""split_groups, the naming pass's split of a recorded chain into evaluation-loop calls, against
eval_groups, the reference split, on every supported version's markers (pure: no process)."""

import random

import pytest

from hotstack.runtimes.python.frames import RawPyFrame, eval_groups, split_groups
from hotstack.runtimes.python.offsets import OWNED_BY_CSTACK_312, SHIM_OWNER_MIN_314, SUPPORTED, table_offsets

NONE_OBJECT = 0x7000


def _chain(rng: random.Random, version: tuple[int, int], n: int) -> list[RawPyFrame]:
    """A leaf-first chain with the markers and shim frames a version records."""
    shim = SHIM_OWNER_MIN_314 if version >= (3, 14) else OWNED_BY_CSTACK_312
    frames = []
    for i in range(n):
        code = rng.choice([0x1000 + 0x40 * rng.randrange(8), 0, NONE_OBJECT]) if rng.random() < 0.2 else \
            0x1000 + 0x40 * rng.randrange(8)
        marker = rng.choice([0, 0, 0, 1, shim, shim + 1]) if version >= (3, 12) else rng.choice([0, 0, 1])
        frames.append(RawPyFrame(code, 0x100 + i, 7, marker))
    return frames


@pytest.mark.parametrize("version", SUPPORTED)
def test_split_groups_is_eval_groups(version):
    o = table_offsets(version)
    rng = random.Random(version[1])
    for n in list(range(0, 6)) + [rng.randrange(6, 97) for _ in range(200)]:
        frames = _chain(rng, version, n)
        named = [f"name{i}" for i in range(n)]      # any item per frame: groups carry the items
        expected = [[named[frames.index(f)] for f in group] for group in eval_groups(o, frames, NONE_OBJECT)]
        # (frames.index finds the first equal frame: make frames distinct through their instruction)
        assert split_groups(o, frames, named, NONE_OBJECT) == expected, (version, frames)


def test_a_311_chain_splits_after_each_entry_frame():
    o = table_offsets((3, 11))
    frames = [RawPyFrame(1, 1, 0, 0), RawPyFrame(2, 2, 0, 1), RawPyFrame(3, 3, 0, 0), RawPyFrame(4, 4, 0, 0)]
    assert split_groups(o, frames, ["a", "b", "c", "d"], 0) == [["a", "b"], ["c", "d"]]
