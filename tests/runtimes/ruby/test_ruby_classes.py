"""Ruby frames named with their class: `Class#method`, `Class.method` (singleton), a module's method
where a class includes it, `block in Class#method`, C functions of a class and of a module.

The expected names come from the workload's own reflection (each method's owner, singleton or not,
as Ruby 3.4's backtraces print them); Debian's Ruby 3.1 prints no class names in its backtraces.
Ruby 3.3 and 3.4 (their class layout: the name in the class's own rb_classext_t) run in the runtime
matrix's roots of Debian 13 and of Debian experimental's ruby3.4, in a plain chroot."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from tests.peers import require_tool
from tests.runtimes.frames_harness import RUBY, profile_until
from tests.runtimes.matrix import VARIANTS, extracted, root_suite

from rb_helpers import HERE

pytestmark = pytest.mark.root

WORKLOAD = HERE / "classes.rb"
_SOURCE = WORKLOAD.read_text().splitlines()
# Rubies run in the runtime matrix's roots (a plain chroot): jit parameter -> (the root's row, program)
IN_ROOTS = {"ruby3.3": ("trixie", "ruby"), "ruby3.4": ("experimental-ruby3.4", VARIANTS["experimental-ruby3.4"][2])}


@pytest.fixture
def in_root():
    """in_root(jit) -> (argv that runs the workload in that row's root, the workload's path there): a
    chroot of the matrix's root, the workload copied into a directory of this test's own."""
    made: list[Path] = []

    def copy(jit: str) -> tuple[list[str], str]:
        row, program = IN_ROOTS[jit]
        root = extracted(root_suite(row))
        private = root / "tmp" / f"hotstack-test-{os.getpid()}"
        private.mkdir(exist_ok=True)
        made.append(private)
        (private / WORKLOAD.name).write_bytes(WORKLOAD.read_bytes())
        return ["chroot", str(root), program], f"/{private.relative_to(root)}/{WORKLOAD.name}"

    yield copy
    for private in made:
        shutil.rmtree(private, ignore_errors=True)


def _def_line(name: str) -> int:
    return next(i for i, line in enumerate(_SOURCE, 1) if line.strip().startswith(f"def {name}"))


@pytest.mark.shares
@pytest.mark.parametrize("jit", ["interpreter", "yjit", *IN_ROOTS])
def test_class_and_singleton_names(ruby_target, jit, in_root):
    """Also under YJIT (Debian's 3.1 has it, off unless --yjit): the same names, order and split; the
    native frames stop at YJIT's code, one `[ruby jit]` frame below every Ruby frame. And in Ruby 3.3
    and 3.4 (Debian's 3.4 build has no YJIT): their interpreters, their layout."""
    workload = WORKLOAD
    if jit in IN_ROOTS:
        argv, workload = in_root(jit)
        # argv: chroot ROOT PROGRAM WORKLOAD 60
        t = ruby_target(argv[0], workload, "60", flags=tuple(argv[1:]))
        assert t.info["version"].startswith(jit.removeprefix("ruby") + "."), t.info
        jit = "interpreter"
    else:
        t = ruby_target(require_tool("ruby"), WORKLOAD, "60", flags=("--yjit",) if jit == "yjit" else ())
    assert t.info["yjit"] == (jit == "yjit"), t.info
    n = t.info["names"]
    assert n["price"].endswith(".price") and n["total"].endswith("#total") and n["spin"].startswith("Spinner#"), n
    block = f"block in {n['total']}"
    total_path = ["<main>", n["run"], n["step"], n["total"], n["times"], block]
    price_path = ["<main>", n["run"], n["step"], n["price"]]

    def split(samples):
        c = Counter()
        for s in samples:
            names = RUBY.names(s)
            if n["spin"] in names:
                c["total" if n["total"] in names else "price" if n["price"] in names else "other"] += s.value
        return c

    samples = profile_until(t.pid, lambda got: split(got)["price"] >= 300, 15)
    c = split(samples)
    assert c["price"] >= 150 and c["other"] == 0, c
    share = 100.0 * c["total"] / (c["total"] + c["price"])
    assert abs(share - 75) <= 5, f"{n['total']} has {share:.1f}% of {c} (built: 75%)"

    spins = Counter()
    for s in samples:
        names = RUBY.names(s)
        if n["spin"] not in names:
            continue
        path = total_path if n["total"] in names else price_path
        assert names[:len(path) + 1] == path + [n["spin"]], names
        # spin's loop calls the clock, and compares (YJIT calls Float#< as a C function)
        assert names[len(path) + 1:] in ([], [n["clock_gettime"]], [n["lt"]]), names
        spins[names[-1]] += s.value
        by_name = {f.name: f for f in s.stack}
        assert by_name[n["spin"]].line > _def_line("spin"), by_name[n["spin"]]
        assert by_name[n["run"]].file == str(workload), by_name[n["run"]]
    assert spins[n["clock_gettime"]] > 0, spins
    marked = 0
    for s in samples:
        user = [f for f in reversed(s.stack) if f.kind is not FrameKind.KERNEL]
        if any(f.name == "[ruby jit]" for f in user):
            last = max(i for i, f in enumerate(user) if f.kind is FrameKind.RUBY)
            assert all(f.kind is FrameKind.RUBY for f in user[:last + 1]), [f.name for f in user]
            assert user[last + 1].name == "[ruby jit]", [f.name for f in user]
            marked += s.value
    if jit == "yjit":
        assert marked >= (c["total"] + c["price"]) // 2, (marked, c)
    else:
        assert marked == 0, marked
    # no method of the workload lost its class, nor kept its bare label
    bare = Counter(name for s in samples for name in RUBY.names(s)
                   if name in ("run", "step", "total", "price", "spin", "times", "clock_gettime", "block in total"))
    assert not bare, bare
