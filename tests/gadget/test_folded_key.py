"""The folded key (profile/folded.py) is built with C-level passes and cleaned only when a name holds
a separator: it must read exactly as the plain per-frame rule says, whatever the names and kinds."""

from __future__ import annotations

import random

from hotstack.profile.folded import folded_key
from hotstack.profile.model import Frame, FrameKind, Sample


def plain_key(sample: Sample, comm: bool = True, kernel_suffix: str = "_[k]", empty: str = "") -> str:
    """The rule, one frame at a time: root first, ';' and newlines out of names, kernel frames suffixed."""
    def clean(name: str) -> str:
        return name.replace(";", ":").replace("\n", " ")
    parts = [clean(sample.comm or "?")] if comm else []
    parts += [clean(f.name) + (kernel_suffix if f.kind is FrameKind.KERNEL else "") for f in reversed(sample.stack)]
    return ";".join(parts) or empty


def test_folded_keys_read_as_the_per_frame_rule_says():
    rng = random.Random(7)
    pieces = ["a", "b", ";", "\n", " ", "x;y", "", "[k]", "_[k]"]
    kinds = [FrameKind.KERNEL, FrameKind.NATIVE, FrameKind.PYTHON]
    for _ in range(5000):
        # (leaf first: kernel frames, then user frames, as model.Sample has them)
        stack = tuple(sorted((Frame("".join(rng.choice(pieces) for _ in range(rng.randint(0, 3))), rng.choice(kinds))
                              for _ in range(rng.randint(0, 8))), key=lambda f: f.kind is not FrameKind.KERNEL))
        sample = Sample(stack, 1, 1, 1, rng.choice(["", "sh", "a;b", "x\ny"]), ())
        for args in ((True, "_[k]", ""), (False, "", "-"), (True, "", ""), (False, "_[k]", "[none]")):
            assert folded_key(sample, *args) == plain_key(sample, *args), (sample, args)


def test_a_deep_stack_with_kernel_frames_at_its_leaf():
    stack = (Frame("do_syscall_64", FrameKind.KERNEL), Frame("entry_SYSCALL_64", FrameKind.KERNEL),
             *(Frame(f"f{i}", FrameKind.PYTHON) for i in range(60)), Frame("main"), Frame("_start"))
    sample = Sample(stack, 3, 1, 1, "python3", ())
    key = folded_key(sample)
    assert key.startswith("python3;_start;main;f59;") and key.endswith(";f0;entry_SYSCALL_64_[k];do_syscall_64_[k]")


def test_fold_of_shared_stacks_reads_as_the_per_frame_rule_says():
    """fold() remembers the frames' part of a key by the stack tuple's identity (the engine gives every
    sample of a stack it named before one tuple): samples sharing tuples, with comms that need
    cleaning, under both suffixes, fold as folded_key does, and new tuples (some made where a freed one
    was) each as itself."""
    from collections import Counter

    from hotstack.profile import folded

    rng = random.Random(11)
    kinds = [FrameKind.KERNEL, FrameKind.NATIVE, FrameKind.PYTHON]
    stacks = [tuple(sorted((Frame(rng.choice(["a", "b;c", "d\ne", "", "f"]), rng.choice(kinds))
                            for _ in range(rng.randint(0, 6))), key=lambda f: f.kind is not FrameKind.KERNEL))
              for _ in range(40)]
    samples = [Sample(rng.choice(stacks), rng.randint(1, 5), 1, 1, rng.choice(["", "sh", "a;b", "x\ny"]), ())
               for _ in range(2000)]
    for suffix in ("_[k]", ""):
        expected: Counter[str] = Counter()
        for sample in samples:
            expected[folded_key(sample, True, suffix)] += sample.value
        assert folded.fold(samples, True, suffix) == expected
        assert folded.fold(samples, True, suffix) == expected       # (the remembered parts)
    for _ in range(200):      # new tuples, some at a freed one's address: each folded as itself
        stack = (Frame(f"g{rng.randint(0, 10**9)}"),)
        assert folded.fold([Sample(stack, 1, 1, 1, "p", ())]) == Counter({f"p;{stack[0].name}": 1})
