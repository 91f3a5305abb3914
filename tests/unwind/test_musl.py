"""Programs on musl libc (Alpine's C library), built here with Debian's musl-gcc, dynamic and static,
with and without frame pointers. musl's libc has no unwind tables (its .eh_frame describes a handful
of functions; Alpine's build the same) and no frame pointers: the kernel unwinder steps its frames
with rows worked out from its machine code (unwind/code_rows.py), through its thread start
(__clone) and its signal trampoline (__restore_rt), to the process's root. Compared with
`perf record --call-graph dwarf` on the same process, whose walk stops at musl's first frame."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from ..conftest import compile_c
from .conftest import HERE
from .native_harness import names
from .test_kernel_unwind import END_ROOT, expand, native_object, sample  # noqa: F401 (fixture)

pytestmark = pytest.mark.root
END_INVALID = 7                    # NU_END_INVALID: code whose frame is not known, shown [truncated]
BUILDS = {
    "dynamic-nofp": ("-O2", "-fomit-frame-pointer"),
    "dynamic-fp": ("-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"),
    "static-nofp": ("-O2", "-fomit-frame-pointer", "-static"),
}
# each mode's callers of its hot code, root first, as the program calls them (a tail call leaves
# its caller: sort_leaf -> qsort -> qsort_r)
CHAINS = {
    "copy": ["main", "work", "mid", "copy_leaf"],
    "sort": ["main", "work", "mid"],
    "print": ["main", "work", "mid", "print_leaf", "snprintf"],
    "threads": ["thread_main", "work", "mid", "copy_leaf"],
}


@pytest.fixture(scope="module")
def musl_gcc():
    if shutil.which("musl-gcc") is None:
        pytest.skip("musl-gcc is needed (Debian's musl-tools)")
    return "musl-gcc"


def build(musl_gcc, build_dir, kind: str):
    return compile_c(HERE / "workloads" / "musl_work.c", build_dir / f"musl_work_{kind}", *BUILDS[kind],
                     compiler=musl_gcc)


def has_chain(frames: list[str], chain: list[str]) -> bool:
    it = iter(frames)
    return all(name in it for name in chain)


@pytest.mark.shares        # the sample count depends on the CPU the workload gets on a busy machine
@pytest.mark.parametrize("kind", list(BUILDS))
@pytest.mark.parametrize("mode", ["copy", "sort", "print", "threads"])
def test_musl_stacks_reach_their_root(native_object, musl_gcc, build_dir, workloads, tmp_path, kind, mode):
    """Hot code in musl's libc (memcpy/memset/strlen, qsort calling back into the program, snprintf,
    threads of pthread_create): >= 95% of the samples reach their root (_start, or __clone for a
    thread) with the program's callers in order; none has a caller the program does not call."""
    exe = build(musl_gcc, build_dir, kind)
    w = workloads([exe, mode], settle=0.3)
    stacks, counters, perf = sample(native_object, w.pid, perf_dir=tmp_path, until=250)
    samples = [(names(f), e) for f, e in expand(stacks) if f]
    assert len(samples) >= 100, counters
    chain = CHAINS[mode]
    # the main thread's root: _start (an untyped label of musl's crt1, named from the entry point);
    # a thread's: __clone's call of its start (hidden: named by its code where libc is stripped)
    root = "__clone" if mode == "threads" else "_start"
    rooted = [n for n, e in samples if e == END_ROOT and n[0] == root]
    good = sum(has_chain(n, chain) for n in rooted)
    assert good >= 0.95 * len(samples), (counters, Counter(tuple(n) for n, _ in samples).most_common(4))
    # a stack that does not reach its root ends where the code's frame is not known (truncated),
    # never at a made-up frame
    assert all(e in (END_ROOT, END_INVALID) for _, e in samples), Counter(e for _, e in samples)
    assert counters["fp_frames"] == 0, counters
    if perf:
        # perf's dwarf walk has no CFI to step musl's frames with: it reaches main in fewer samples
        theirs = sum(has_chain(n, chain) for n, _ in perf) / len(perf)
        assert good / len(samples) >= theirs - 0.02, (good / len(samples), theirs)


@pytest.mark.shares
@pytest.mark.parametrize("kind", ["dynamic-nofp", "static-nofp"])
def test_musl_signal_handler_through_restore_rt(native_object, musl_gcc, build_dir, workloads, kind):
    """A SIGPROF handler's hot loop: its frames, musl's __restore_rt (found by its code), then the
    interrupted snprintf loop down to main and the root."""
    exe = build(musl_gcc, build_dir, kind)
    w = workloads([exe, "signal"], settle=0.3)
    stacks, counters, _ = sample(native_object, w.pid, until=300)
    handled = [(names(f), e) for f, e in expand(stacks) if f and "handler_spin" in names(f)]
    assert len(handled) >= 20, (counters, Counter(tuple(names(f)) for f, _ in stacks).most_common(4))
    # (on_signal calls handler_spin last: a tail call, its frame gone)
    through = sum(e == END_ROOT and has_chain(n, ["_start", "main", "work", "mid", "__restore_rt", "handler_spin"])
                  and n[n.index("handler_spin") - 1] == "__restore_rt" for n, e in handled)
    assert through >= 0.9 * len(handled), Counter(tuple(n) for n, _ in handled).most_common(3)
    assert counters["signal"] > 0, counters


@pytest.mark.shares
@pytest.mark.parametrize("kind", ["dynamic-nofp", "static-nofp"])
def test_musl_deep_recursion_reaches_main(native_object, musl_gcc, build_dir, workloads, kind):
    """100 nested calls under main (the test program keeps 128 frames), the root musl's: every frame
    stepped, the stack complete."""
    exe = build(musl_gcc, build_dir, kind)
    w = workloads([exe, "deep"], settle=0.3)
    stacks, counters, _ = sample(native_object, w.pid, until=250)
    spins = [(names(f), e) for f, e in expand(stacks) if f and names(f)[-1] == "spin"]
    assert len(spins) >= 100, counters
    rooted = sum(e == END_ROOT and n[0] == "_start" and n.count("descend") == 101 and "main" in n for n, e in spins)
    assert rooted >= 0.98 * len(spins), Counter((len(n), n[0], e) for n, e in spins).most_common(3)


def test_musl_libc_rows_from_its_code():
    """The table of Debian's musl libc: rows worked out from the code for most of it, the signal
    trampoline and __clone's thread root among them (a table from the CFI alone has ~30 rows)."""
    import glob

    from hotstack.symbols.elf import ElfFile
    from hotstack.unwind import cfi
    from hotstack.unwind.code_rows import KIND_UNKNOWN
    from hotstack.unwind.kernel_tables import build_file_table

    libc = sorted(glob.glob("/usr/lib/*-linux-musl/libc.so"))
    if not libc:
        pytest.skip("Debian's musl is needed")
    with ElfFile(libc[0]) as elf:
        table = build_file_table(elf)
    kinds = Counter(int(table.rules["kind"][i]) for i in table.rule_ids)
    assert "code" in table.source
    assert kinds[cfi.KIND_CFA_SP] > 5000, kinds
    assert kinds[cfi.KIND_SIGNAL] == 1 and kinds[cfi.KIND_STOP] >= 2, kinds     # __restore_rt; __clone, _dlstart
    assert kinds[KIND_UNKNOWN] > 0, kinds


def test_musl_libc_code_rows_are_bounded(monkeypatch):
    """A file with more code without CFI than MAX_GAP_BYTES keeps its CFI rows alone (frame
    pointers where they end), not minutes of analysis."""
    import glob

    from hotstack.symbols.elf import ElfFile
    from hotstack.unwind import code_rows
    from hotstack.unwind.kernel_tables import build_file_table

    libc = sorted(glob.glob("/usr/lib/*-linux-musl/libc.so"))
    if not libc:
        pytest.skip("Debian's musl is needed")
    monkeypatch.setattr(code_rows, "MAX_GAP_BYTES", 64 << 10)
    with ElfFile(libc[0]) as elf:
        table = build_file_table(elf)
    assert "code" not in table.source and len(table) < 100, (table.source, len(table))


def test_musl_hidden_assembly_is_named_by_its_code():
    """Stripped musl libc: __restore_rt and __clone are in no symbol table; the exported assembly
    before them has size 0 (memset, __setjmp). Each is named by its code, and the symbol before
    it ends there."""
    import glob

    from hotstack.symbols.elf import ElfFile
    from hotstack.symbols.known_code import CLONE_CHILD, SIGRETURN
    from hotstack.symbols.symtab import SymbolTable

    libc = sorted(glob.glob("/usr/lib/*-linux-musl/libc.so"))
    if not libc:
        pytest.skip("Debian's musl is needed")
    with ElfFile(libc[0]) as elf:
        (restorer,) = elf.find_code(SIGRETURN)
        (clone,) = elf.find_code(CLONE_CHILD)
        table = SymbolTable(elf)
        named = table.lookup_many([restorer - 1, restorer + 8, clone + 2, clone + len(CLONE_CHILD) - 1])
    assert [n for n, _ in named] == ["__restore_rt", "__restore_rt", "__clone", "__clone"], named


def test_code_rows_agree_with_the_compilers_cfi_on_glibc():
    """The ground truth for rows worked out from code: glibc's libc, which has CFI for every
    function, analysed as if it had none. At each row of its CFI (a CFA = RSP + n rule) the rows
    from its code say the same n, or do not know (UNKNOWN: the walk ends truncated); they are not
    wrong (a wrong n is a made-up caller)."""
    import glob

    import numpy as np

    from hotstack.symbols.elf import ElfFile
    from hotstack.unwind import cfi
    from hotstack.unwind.builder import build_table_fast
    from hotstack.unwind.code_rows import KIND_UNKNOWN, code_rows
    from hotstack.unwind.kernel_tables import kernel_rules

    libc = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libc.so.6"))
    if not libc:
        pytest.skip("Debian's x86-64 glibc is needed")
    with ElfFile(libc[0]) as elf:
        table = build_table_fast(elf)
        rules = kernel_rules(table)[table.rule_ids]
        pcs, code = code_rows(elf, np.zeros(0, np.uint64), np.zeros(0, np.uint8))     # (no CFI)
    at = np.searchsorted(np.array(pcs, np.uint64), table.pcs, side="right") - 1
    seen = Counter()
    for i, rule in zip(at.tolist(), rules):
        if rule["kind"] != cfi.KIND_CFA_SP or i < 0:
            continue
        kind, cfa = code[i][:2]
        seen["unknown" if kind in (KIND_UNKNOWN, cfi.KIND_INVALID) else
             "same" if kind == cfi.KIND_CFA_SP and cfa == int(rule["cfa"]) else "other"] += 1
    total = sum(seen.values())
    assert total > 10_000, seen
    assert seen["same"] >= 0.9 * total, seen
    assert seen["other"] <= 0.001 * total, seen
