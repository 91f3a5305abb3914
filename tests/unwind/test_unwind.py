"""Native unwinding without frame pointers (in the kernel, the default), through the whole profiler,
against real processes and the real kernel."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess

import pytest

from ..conftest import have
from ..peers import require_tool
from .conftest import profile, user_names

pytestmark = pytest.mark.root

CHAIN = ["main", "a", "b", "c"]


def contains(names: list[str], run: list[str]) -> bool:
    """`run` appears in `names` as consecutive frames."""
    n = len(run)
    return any(names[i:i + n] == run for i in range(len(names) - n + 1))


def leaf_is(names: list[str], name: str) -> bool:
    return bool(names) and names[-1] == name


def share(samples, wanted, of=lambda names: True) -> tuple[float, int]:
    total = hit = 0
    for s in samples:
        names = user_names(s)
        if not of(names):
            continue
        total += s.value
        hit += s.value if wanted(names) else 0
    return (hit / total if total else 0.0), total


@pytest.mark.shares
def test_omit_frame_pointer_chain_is_intact(chain, workloads):
    w = workloads([chain, "busy"])
    prof, profiler = profile([w.pid])
    ratio, total = share(prof.samples, lambda n: contains(n, CHAIN) and n[0] == "_start",
                         of=lambda n: leaf_is(n, "c"))
    assert total >= 20, prof.samples
    assert ratio >= 0.95, [user_names(s) for s in prof.samples]
    counters = profiler.kernel_counters
    assert counters["end_root"] >= 0.95 * counters["walks"], counters


@pytest.mark.shares
def test_frame_pointer_mode_stays_in_kernel(chain, workloads):
    """unwind="fp": the same binary loses its callers (why the kernel unwinder exists)."""
    w = workloads([chain, "busy"])
    prof, profiler = profile([w.pid], seconds=1.5, unwind="fp")
    assert profiler.kernel_counters == {}
    ratio, total = share(prof.samples, lambda n: contains(n, CHAIN), of=lambda n: leaf_is(n, "c"))
    assert total >= 15
    assert ratio < 0.5


@pytest.mark.shares
def test_debian_python3_reaches_main_through_libpython(workloads, tmp_path):
    python = "/usr/bin/python3"
    script = tmp_path / "recurse.py"
    script.write_text(
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "while True:\n    fib(20)\n    sorted(range(3000), key=lambda x: -x)\n")
    w = workloads([python, script])
    prof, profiler = profile([w.pid], seconds=2.5)
    ratio, total = share(prof.samples, lambda n: n[:1] == ["_start"] and "Py_BytesMain" in n
                         and "_PyEval_EvalFrameDefault" in n)
    assert total >= 25
    assert ratio >= 0.95, (profiler.kernel_counters, [user_names(s) for s in prof.samples
                                                      if user_names(s)[:1] != ["_start"]][:5])


@pytest.mark.shares
def test_signal_handler_frame(chain, workloads):
    w = workloads([chain, "signal"])
    prof, _ = profile([w.pid])
    ratio, total = share(
        prof.samples,
        lambda n: n[:1] == ["_start"] and contains(n, ["main", "a"]) and contains(n, ["on_signal", "b", "c"])
        and n.index("a") < n.index("on_signal"),
        of=lambda n: leaf_is(n, "c"))
    assert total >= 20
    assert ratio >= 0.95, [user_names(s) for s in prof.samples][:5]


@pytest.mark.shares
def test_eight_busy_threads(chain, workloads):
    w = workloads([chain, "threads"])
    prof, profiler = profile([w.pid], seconds=2.5)
    in_c = [s for s in prof.samples if leaf_is(user_names(s), "c")]
    assert len({s.tid for s in in_c}) >= 8
    ratio, total = share(in_c, lambda n: contains(n, ["start_thread", "thread_main", "a", "b", "c"]))
    assert total >= 50
    assert ratio >= 0.95
    counters = profiler.kernel_counters
    assert counters["end_root"] >= 0.95 * counters["walks"], counters   # down to clone3, the thread's root


def test_samples_in_the_kernel_keep_their_user_stack(chain, workloads):
    w = workloads([chain, "syscall"])
    prof, _ = profile([w.pid])
    in_kernel = [s for s in prof.samples if s.stack and s.stack[0].kind.name == "KERNEL"]
    ratio, total = share(in_kernel, lambda n: n[:1] == ["_start"] and contains(n, CHAIN))
    assert total >= 20
    assert ratio >= 0.95


@pytest.mark.shares
def test_code_without_unwind_info_falls_back_to_frame_pointers(chain, workloads):
    w = workloads([chain, "jit"])
    prof, profiler = profile([w.pid])
    ratio, total = share(prof.samples, lambda n: n[:1] == ["_start"] and contains(n, ["main", "a", "b"])
                         and n[-1] == "c" and n.index("b") == len(n) - 3, of=lambda n: leaf_is(n, "c"))
    assert total >= 20
    assert ratio >= 0.95, [user_names(s) for s in prof.samples][:5]
    assert profiler.kernel_counters["fp_frames"] > 0


@pytest.mark.shares
def test_deleted_executable(chain, workloads, tmp_path):
    copy = tmp_path / "gone"
    shutil.copy(chain, copy)
    w = workloads([copy, "busy"])
    copy.unlink()
    prof, profiler = profile([w.pid])
    ratio, total = share(prof.samples, lambda n: n[:1] == ["_start"] and contains(n, CHAIN),
                         of=lambda n: leaf_is(n, "c"))
    assert total >= 20
    assert ratio >= 0.95


@pytest.mark.parametrize("path", ["/lib/x86_64-linux-gnu/libc.so.6", "chain"])
def test_table_matches_readelf(path, chain):
    """Rows agree with `readelf -wF` (binutils' own CFI interpreter) at random locations."""
    require_tool("readelf")
    from hotstack.symbols.elf import ElfFile
    from hotstack.unwind import cfi
    from hotstack.unwind.table import build_table

    path = str(chain) if path == "chain" else path
    table = build_table(ElfFile(path))
    # readelf exits 1 over harmless warnings on some files (Debian's libc): read its output anyway.
    out = subprocess.run(["readelf", "-wF", path], capture_output=True, text=True).stdout
    rows, cols, in_fde = [], None, False
    for line in out.splitlines():
        if " FDE " in line or " CIE" in line or "ZERO terminator" in line:
            cols, in_fde = None, " FDE " in line     # rows of a CIE are its initial state, not code
        elif line.startswith("   LOC") and in_fde:
            cols = line.split()
        elif cols and re.match(r"^[0-9a-f]{8,16} ", line):
            rows.append(dict(zip(cols, line.split())))
    assert len(rows) > 10
    random.seed(6)
    checked = bad = 0
    for row in random.sample(rows, min(2000, len(rows))):
        loc, cfa, ra, rbp = int(row["LOC"], 16), row["CFA"], row.get("ra", "u"), row.get("rbp", "u")
        rule = table.find(loc)
        if ra == "u":
            expected = (cfi.KIND_STOP, None, None)
        elif re.fullmatch(r"rsp\+\d+", cfa):
            expected = (cfi.KIND_CFA_SP, int(cfa[4:]), cfi.RBP_SAME if rbp == "u" else int(rbp[1:]))
        elif re.fullmatch(r"rbp\+\d+", cfa):
            expected = (cfi.KIND_CFA_FP, int(cfa[4:]), cfi.RBP_SAME if rbp == "u" else int(rbp[1:]))
        else:
            continue    # expression rows (PLT, signal trampolines): checked by the stack tests
        checked += 1
        got = (None, None, None) if rule is None else \
            (rule.kind, None, None) if rule.kind == cfi.KIND_STOP else (rule.kind, rule.cfa_offset, rule.rbp_offset)
        bad += got != expected
    assert checked > 10
    assert bad <= 0.005 * checked


@pytest.mark.shares
def test_debug_frame_of_a_separate_debug_file(workloads, tmp_path):
    """Code without .eh_frame rows, whose rules live in the .debug_frame of a debuglink'ed file."""
    from .conftest import HERE

    exe = tmp_path / "split"
    subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables",
                    "-fno-unwind-tables", "-pthread", str(HERE / "workloads" / "chain.c"), "-o", str(exe)], check=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(exe), f"{exe}.debug"], check=True)
    subprocess.run(["objcopy", "--strip-debug", f"--add-gnu-debuglink={exe}.debug", str(exe)], check=True,
                   cwd=tmp_path)
    w = workloads([exe, "busy"])
    prof, profiler = profile([w.pid])
    ratio, total = share(prof.samples, lambda n: n[:1] == ["_start"] and contains(n, CHAIN),
                         of=lambda n: leaf_is(n, "c"))
    assert total >= 20
    assert ratio >= 0.95, [user_names(s) for s in prof.samples][:5]
    assert any("debug:.debug_frame" in source for source in profiler.table_sources), profiler.table_sources


def _go() -> str | None:
    return shutil.which("go") or next((p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if os.path.exists(p)),
                                      None)


@pytest.fixture(scope="module")
def gochain(build_dir):
    go = _go()
    if go is None:
        require_tool("go")
    from .conftest import HERE

    out = build_dir / "gochain"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    subprocess.run([go, "build", "-o", str(out), "."], cwd=HERE / "workloads" / "gochain", env=env, check=True)
    return out


@pytest.mark.shares
def test_go_binary_with_tables(gochain, workloads):
    """Go functions unwound from .gopclntab rows (frame pointers where the Go ABI keeps them): the
    frameless leaf's caller (main.b), which a plain frame-pointer walk skips, is there."""
    w = workloads([gochain])
    prof, profiler = profile([w.pid])
    ratio, total = share(prof.samples, lambda n: n[:2] == ["runtime.goexit", "runtime.main"]
                         and contains(n, ["main.main", "main.a", "main.b", "main.c"]),
                         of=lambda n: leaf_is(n, "main.c"))
    assert total >= 20
    assert ratio >= 0.95, [user_names(s) for s in prof.samples][:5]
    assert profiler.kernel_counters["go_frames"] > 0


@pytest.mark.shares
def test_executable_in_a_memfd(chain, workloads):
    """Code mapped from a memfd (no path on any filesystem): tables come through /proc/PID/map_files."""
    launcher = ("import os, sys\n"
                "fd = os.memfd_create('chainmem', 0)\n"
                "os.write(fd, open(sys.argv[1], 'rb').read())\n"
                "os.execv(f'/proc/self/fd/{fd}', ['chainmem', 'busy'])\n")
    w = workloads(["/usr/bin/python3", "-c", launcher, chain], settle=0.5)
    prof, profiler = profile([w.pid])
    ratio, total = share(prof.samples, lambda n: n[:1] == ["_start"] and contains(n, CHAIN),
                         of=lambda n: leaf_is(n, "c"))
    assert total >= 20
    assert ratio >= 0.95, [user_names(s) for s in prof.samples][:5]


def test_plt_and_signal_trampoline_rules(chain):
    """The PLT's CFA expression becomes a PLT rule; libc's signal trampoline a signal rule;
    _start's undefined return address a stop."""
    from hotstack.symbols.elf import ElfFile
    from hotstack.unwind import cfi
    from hotstack.unwind.table import build_table

    elf = ElfFile(str(chain))
    table = build_table(elf)
    plt = elf.section(".plt")
    assert plt is not None
    rules = [table.find(a) for a in range(plt.addr + 16, plt.addr + plt.size, 5)]
    assert rules and all(r is not None and r.kind == cfi.KIND_PLT and r.rbp_offset in (10, 11) for r in rules)
    assert table.find(elf.entry).kind == cfi.KIND_STOP
    libc = build_table(ElfFile("/lib/x86_64-linux-gnu/libc.so.6"))
    assert any(r.kind == cfi.KIND_SIGNAL for r in libc.rules)
