"""The Symbolizer on live processes: unknown symbols as the seed says, caches and their debug info."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from hotstack.procs import ProcessTable
from hotstack.profile.model import FrameKind
from hotstack.symbols.symbolizer import Symbolizer

from .conftest import WORKLOADS, need, run


@pytest.fixture(scope="module")
def c_programs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("symbolizer")
    gcc = need("gcc")
    exe = out / "hot_c"
    run(gcc, "-O1", "-fno-omit-frame-pointer", WORKLOADS / "hot_c.c", "-o", exe)
    run("strip", exe, "-o", out / "hot_c_stripped")
    return {"plain": exe, "stripped": out / "hot_c_stripped"}


def _address_of(symbolizer: Symbolizer, pid: int, path: Path, name: str) -> int:
    """The runtime address of a function of a process (from its maps and nm)."""
    nm = run("nm", path).stdout
    value = next(int(ln.split()[0], 16) for ln in nm.splitlines() if ln.endswith(" " + name))
    info = symbolizer.processes.get(pid)
    text = next(m for m in info.mappings.mappings if m.path == str(path) and "x" in m.perms)
    from hotstack.symbols.elf import ElfFile

    with ElfFile(str(path)) as elf:
        seg = next(s for s in elf.segments if s.offset <= text.offset < s.offset + s.filesz)
    return value - seg.vaddr + seg.offset - text.offset + text.start


def test_named_stripped_and_gone(c_programs, workloads):
    sym = Symbolizer(ProcessTable())
    plain = workloads([c_programs["plain"]])
    stripped = workloads([c_programs["stripped"]])
    addr = _address_of(sym, plain.pid, c_programs["plain"], "stripped_hot_loop")
    [frame] = sym.user_frames(plain.pid, [addr + 3])
    assert (frame.name, frame.kind, frame.resolved) == ("stripped_hot_loop", FrameKind.NATIVE, True)
    assert frame.module == str(c_programs["plain"]) and frame.build_id

    # Same code, no symbols: module+0xOFF (the ELF address), not resolved.
    sym.processes.get(stripped.pid)
    [frame] = sym.user_frames(stripped.pid, [addr - _base(sym, plain.pid, c_programs["plain"])
                                             + _base(sym, stripped.pid, c_programs["stripped"]) + 3])
    assert frame.name.startswith("hot_c_stripped+0x") and not frame.resolved

    # No mapping at all, and a process that never existed: [unknown].
    [frame] = sym.user_frames(plain.pid, [0x10])
    assert frame.name == "[unknown]"
    assert [f.name for f in sym.user_frames(4_000_000, [addr])] == ["[unknown]"]

    info = sym.debug_info()
    assert info["elf_cache"]["entries"] >= 2 and info["elf_cache"]["bytes"] > 0
    assert info["pid_cache"]["entries"] == 2
    assert info["frames"]["named"] >= 1 and info["frames"]["unnamed"] >= 2
    assert any(f["symbols"] > 0 and "symtab/dynsym" in f["sources"] for f in info["elf_cache"]["files"])
    metrics = sym.metrics()
    assert metrics["elf_cache_misses"] >= 2 and "pid_cache_bytes" in metrics


def _base(sym: Symbolizer, pid: int, path: Path) -> int:
    info = sym.processes.get(pid)
    return min(m.start for m in info.mappings.mappings if m.path == str(path))


def _a_running_copy(c_programs, workloads, exe: Path):
    """A copy of the plain program at `exe`, running, read by a new symbolizer: (the workload, the
    symbolizer, the address of its stripped_hot_loop)."""
    shutil.copy(c_programs["plain"], exe)
    w = workloads([exe])
    sym = Symbolizer(ProcessTable())
    sym.processes.get(w.pid)
    return w, sym, _address_of(sym, w.pid, exe, "stripped_hot_loop")


def test_file_deleted_after_start_still_resolves_then_process_gone(c_programs, workloads, tmp_path):
    exe = tmp_path / "doomed"
    w, sym, addr = _a_running_copy(c_programs, workloads, exe)
    exe.unlink()      # map_files still reach the deleted file while the process lives
    assert sym.user_frames(w.pid, [addr])[0].name == "stripped_hot_loop"
    # A new symbolizer after the process is gone knows nothing of it: [unknown].
    w.stop()
    fresh = Symbolizer(ProcessTable())
    assert fresh.user_frames(w.pid, [addr])[0].name == "[unknown]"


def test_elf_cache_is_shared_by_build_id_and_bounded(c_programs, workloads):
    a = workloads([c_programs["plain"]])
    b = workloads([c_programs["plain"]])
    sym = Symbolizer(ProcessTable(), elf_cache_bytes=1)       # every new file evicts the previous
    addr_a = _address_of(sym, a.pid, c_programs["plain"], "stripped_hot_loop")
    addr_b = _address_of(sym, b.pid, c_programs["plain"], "stripped_hot_loop")
    assert sym.user_frames(a.pid, [addr_a])[0].name == "stripped_hot_loop"
    opened = sym.stats.files_opened
    assert sym.user_frames(b.pid, [addr_b])[0].name == "stripped_hot_loop"
    assert sym.stats.files_opened == opened          # same file: the cached table is reused
    libc = [f for f in sym.user_frames(a.pid, [addr_a, _libc_address(sym, a.pid)])]
    assert libc[0].name == "stripped_hot_loop"
    assert len(sym.elf_cache) == 1 and sym.elf_cache.stats.evictions >= 1


def _libc_address(sym: Symbolizer, pid: int) -> int:
    info = sym.processes.get(pid)
    m = next(m for m in info.mappings.mappings if "libc" in m.path and "x" in m.perms)
    return m.start + 0x100


def test_pid_reuse_is_a_new_process(c_programs, workloads):
    sym = Symbolizer(ProcessTable())
    w = workloads([c_programs["plain"]])
    addr = _address_of(sym, w.pid, c_programs["plain"], "stripped_hot_loop")
    sym.user_frames(w.pid, [addr])
    info = sym.processes.get(w.pid)
    key = (w.pid, info.start_time)
    assert key in sym.pid_cache
    # Maps read again (exec, dlopen): the process's cache entry starts afresh.
    from hotstack.procs.maps import MappingIndex, read_maps

    info.mappings = MappingIndex(read_maps(w.pid))
    sym.user_frames(w.pid, [addr])
    assert sym.pid_cache.peek(key).mappings is info.mappings


def test_zero_and_top_addresses_do_not_break_lookups(c_programs, workloads):
    w = workloads([c_programs["plain"]])
    sym = Symbolizer(ProcessTable())
    frames = sym.user_frames(w.pid, [0, 0, (1 << 64) - 1, 1])
    assert [f.name for f in frames] == ["[unknown]"] * 4
    assert len(sym.kernel_frames([0, 0, (1 << 64) - 1])) == 3


def test_bad_demangle_mode_is_one_line_exit_2():
    from tests.conftest import hotstack

    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--demangle", "fancy", "--timeout", "1")
    assert r.returncode == 2
    assert "demangle 'fancy': expected one of none, simplified, templates, full" in r.stderr
    assert "Traceback" not in r.stderr


def test_exec_invalidates_the_process_cache(c_programs, workloads, tmp_path):
    """exec keeps pid and start time: the symbolizer notices the new executable and starts afresh."""
    import sys

    script = tmp_path / "exec_later.py"
    script.write_text(f"import os, time\ntime.sleep(1.5)\nos.execv({str(c_programs['plain'])!r}, ['hot_c'])\n")
    w = workloads([sys.executable, script])
    sym = Symbolizer(ProcessTable())
    info = sym.processes.get(w.pid)
    python_text = next(m for m in info.mappings.mappings if m.is_file and "x" in m.perms)
    sym.user_frames(w.pid, [python_text.start + 0x10])
    before = sym.pid_cache.peek((w.pid, info.start_time))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.readlink(f"/proc/{w.pid}/exe") != str(c_programs["plain"]):
        time.sleep(0.1)
    time.sleep(1.1)     # past the once-a-second check
    # Without noticing the exec, the old interpreter's mapping would still "resolve" this address.
    stale = sym.user_frames(w.pid, [python_text.start + 0x10])[0]
    assert stale.module != python_text.path, stale
    # The address from the maps as they are now (the symbolizer's copy is still the old one).
    from hotstack.procs.maps import read_maps
    from hotstack.symbols.elf import ElfFile

    text = next(m for m in read_maps(w.pid) if m.path == str(c_programs["plain"]))
    nm = run("nm", c_programs["plain"]).stdout
    value = next(int(ln.split()[0], 16) for ln in nm.splitlines() if ln.endswith(" stripped_hot_loop"))
    with ElfFile(str(c_programs["plain"])) as elf:
        seg = next(g for g in elf.segments if g.offset <= text.offset < g.offset + g.filesz)
    addr = value - seg.vaddr + seg.offset - text.offset + text.start
    assert sym.user_frames(w.pid, [addr])[0].name == "stripped_hot_loop"
    after = sym.pid_cache.peek((w.pid, info.start_time))
    assert after is not before and after.exe == (os.stat(c_programs["plain"]).st_dev,
                                                  os.stat(c_programs["plain"]).st_ino)


def _patched_copy(src: Path, dst: Path, old: bytes, new: bytes) -> Path:
    """A copy of `src` with `old` replaced by `new` (same length) inside its .strtab only: same size,
    same build id, same code, other names."""
    from hotstack.symbols.elf import ElfFile

    assert len(old) == len(new)
    data = bytearray(src.read_bytes())
    with ElfFile(str(src)) as elf:
        strtab = elf.section(".strtab")
    at = data.find(old, strtab.offset, strtab.offset + strtab.size)
    assert at >= 0, f"{old!r} not in .strtab"
    data[at:at + len(old)] = new
    dst.write_bytes(bytes(data))
    dst.chmod(0o755)
    return dst


def test_same_build_id_other_bytes_never_share_symbols(c_programs, workloads, tmp_path):
    """Issue 18 item 1 (symbols): a copy with the same build id and size but other symbol bytes
    named the original's frames (the cache was keyed by build id and size alone)."""
    from hotstack.symbols.elf import ElfFile

    original = tmp_path / "same_a"
    shutil.copy(c_programs["plain"], original)
    patched = _patched_copy(c_programs["plain"], tmp_path / "same_b", b"stripped_hot_loop", b"stripped_hot_lOOp")
    with ElfFile(str(original)) as a, ElfFile(str(patched)) as b:
        assert a.build_id() == b.build_id() and a.size == b.size
    wa, wb = workloads([original]), workloads([patched])
    sym = Symbolizer(ProcessTable())
    # The original first: its table is cached; the patched copy must not be named from it.
    addr_a = _address_of(sym, wa.pid, original, "stripped_hot_loop")
    assert sym.user_frames(wa.pid, [addr_a])[0].name == "stripped_hot_loop"
    addr_b = _address_of(sym, wb.pid, patched, "stripped_hot_lOOp")
    assert sym.user_frames(wb.pid, [addr_b])[0].name == "stripped_hot_lOOp"
    # And the other way round, in a fresh symbolizer: the patched one first.
    sym = Symbolizer(ProcessTable())
    assert sym.user_frames(wb.pid, [addr_b])[0].name == "stripped_hot_lOOp"
    assert sym.user_frames(wa.pid, [addr_a])[0].name == "stripped_hot_loop"
    keys = [k for k, _, _ in sym.elf_cache.items() if k[0] == "build-id" and k[2] == a.size]
    assert len(keys) == 2, keys
    with ElfFile(str(original)) as a, ElfFile(str(patched)) as b:
        assert a.symbol_digest() != b.symbol_digest()


def test_corrupt_symbol_table_of_a_same_build_id_copy_does_not_leak(c_programs, workloads, tmp_path):
    """The copy's .symtab zeroed (a corrupt file): its frames are module+0xOFF; the intact file,
    profiled after it, still gets its names."""
    from hotstack.symbols.elf import ElfFile

    corrupt = tmp_path / "corrupt_c"
    data = bytearray(c_programs["plain"].read_bytes())
    with ElfFile(str(c_programs["plain"])) as elf:
        symtab = elf.section(".symtab")
    data[symtab.offset:symtab.offset + symtab.size] = bytes(symtab.size)
    corrupt.write_bytes(bytes(data))
    corrupt.chmod(0o755)
    intact = tmp_path / "intact_c"
    shutil.copy(c_programs["plain"], intact)
    wc, wi = workloads([corrupt]), workloads([intact])
    sym = Symbolizer(ProcessTable())
    addr_i = _address_of(sym, wi.pid, intact, "stripped_hot_loop")
    offset = addr_i - _base(sym, wi.pid, intact)
    [frame] = sym.user_frames(wc.pid, [_base(sym, wc.pid, corrupt) + offset])
    assert not frame.resolved and frame.name.startswith("corrupt_c+0x"), frame
    assert sym.user_frames(wi.pid, [addr_i])[0].name == "stripped_hot_loop"


def test_a_new_process_of_a_known_program_is_named_from_frames_met_before(c_programs, workloads, tmp_path, monkeypatch):
    """Frames are remembered by file and offset for every process: a second process of the same
    program (its own load address) is named without a lookup in the file, a leaf and a return
    address at one offset stay apart, and the same bytes under another path show that path."""
    from hotstack.symbols import symbolizer as symbolizer_module

    plain = c_programs["plain"]
    copy = tmp_path / "hot_c_copy"
    shutil.copy(plain, copy)
    first, second, other = workloads([plain]), workloads([plain]), workloads([copy])
    sym = Symbolizer(ProcessTable())
    addr = {w.pid: _address_of(sym, w.pid, path, "stripped_hot_loop")
            for w, path in ((first, plain), (second, plain), (other, copy))}
    # a leaf, then the same instruction as a caller's return address (looked up one byte before)
    a = sym.user_frames(first.pid, [addr[first.pid] + 4, addr[first.pid] + 5])
    assert [f.name for f in a] == ["stripped_hot_loop", "stripped_hot_loop"]
    lookups = []
    real_resolve = symbolizer_module.ModuleSymbols.resolve
    monkeypatch.setattr(symbolizer_module.ModuleSymbols, "resolve",
                        lambda self, vaddrs, demangle: lookups.append(vaddrs) or real_resolve(self, vaddrs, demangle))
    b = sym.user_frames(second.pid, [addr[second.pid] + 4, addr[second.pid] + 5])
    assert lookups == [] and b == a
    assert b[0].address + 1 == b[1].address         # the caller's frame reports its own address
    # the same bytes elsewhere: looked up again for its own path (the file's results are reused)
    c = sym.user_frames(other.pid, [addr[other.pid] + 4])
    assert c[0].name == "stripped_hot_loop" and c[0].module == str(copy) and len(lookups) == 1


def test_only_files_looked_up_since_the_last_release_are_released(c_programs, workloads):
    """release_file_pages (after each collect) gives back the pages of the files whose symbols were
    read since it last ran, and leaves the others alone: a host's cache holds hundreds of files."""
    sym = Symbolizer(ProcessTable())
    proc = workloads([c_programs["plain"]])
    addr = _address_of(sym, proc.pid, c_programs["plain"], "stripped_hot_loop")
    sym.user_frames(proc.pid, [addr + 3])
    [module] = [m for m in sym.cached_files() if m.path == str(c_programs["plain"])]
    released: list[int] = []
    real_release = module.elf.release_pages
    module.elf.release_pages = lambda *a: released.append(1) or real_release(*a)
    assert module.touched
    sym.release_file_pages()
    assert released == [1] and not module.touched
    sym.user_frames(proc.pid, [addr + 3])        # remembered: no lookup reads the file
    sym.release_file_pages()
    assert released == [1] and not module.touched
    sym.user_frames(proc.pid, [addr + 5])        # a new address: the file's symbols are read
    assert module.touched
    sym.release_file_pages()
    assert released == [1, 1]
    [frame] = sym.user_frames(proc.pid, [addr + 7])
    assert frame.name == "stripped_hot_loop"     # read again after its pages went


def test_a_stack_new_only_by_its_leaf_is_named_as_a_new_stack_is(c_programs, workloads):
    """A stack whose frames but the leaf were named in the process before takes the leaf-only path:
    its frames, final flag and counts are those a symbolizer that met none of it gives, and its leaf
    is remembered for the process; a leaf with no symbol or no file is named as the full pass does."""
    plain, stripped = c_programs["plain"], c_programs["stripped"]
    proc, bare = workloads([plain]), workloads([stripped])
    sym = Symbolizer(ProcessTable())
    hot = _address_of(sym, proc.pid, plain, "stripped_hot_loop")
    main = _address_of(sym, proc.pid, plain, "main")
    libc = _libc_address(sym, proc.pid)
    callers = [main + 0x10, libc + 0x40]
    sym.final_user_frames(proc.pid, [hot + 1] + callers)          # the callers become known
    for leaf, name in ((hot + 6, "stripped_hot_loop"), (main + 3, "main"), (0x10, "[unknown]")):
        fresh = Symbolizer(ProcessTable())
        want = fresh.final_user_frames(proc.pid, [leaf] + callers)
        hits, misses = sym.stats.hits, sym.stats.misses
        got = sym.final_user_frames(proc.pid, [leaf] + callers)
        assert got == want and got[0][0].name == name
        assert (sym.stats.hits - hits, sym.stats.misses - misses) == (fresh.stats.hits, fresh.stats.misses)
    assert want[1] is False       # (no file there: the full pass's answer, not final)
    proc_symbols = sym.pid_cache.get((proc.pid, sym.processes.get(proc.pid).start_time))
    assert proc_symbols.frames[(hot + 6) * 2 + 1].name == "stripped_hot_loop"
    # a file without symbols: module+0xOFF, final (it will not be named later either)
    bare_hot = hot - _base(sym, proc.pid, plain) + _base(sym, bare.pid, stripped)
    bare_callers = [bare_hot - hot + main + 0x10]
    sym.final_user_frames(bare.pid, [bare_hot + 1] + bare_callers)
    frames, final = sym.final_user_frames(bare.pid, [bare_hot + 6] + bare_callers)
    assert frames[0].name.startswith("hot_c_stripped+0x") and not frames[0].resolved and final
    assert (frames, final) == Symbolizer(ProcessTable()).final_user_frames(bare.pid, [bare_hot + 6] + bare_callers)


def test_a_file_replaced_at_its_path_after_the_process_exited_is_not_read_as_its_own(c_programs, workloads,
                                                                                      tmp_path):
    """A process gone before its frames are named is named through its file's path, and the file
    there may be another by then (a program rebuilt, a package upgraded): its symbols at those
    offsets are another program's functions. The mapping's inode tells: such frames stay unnamed."""
    exe = tmp_path / "rebuilt"
    w, sym, addr = _a_running_copy(c_programs, workloads, exe)
    w.stop()
    other = tmp_path / "other"
    run(need("g++"), "-O0", WORKLOADS / "hot_cpp.cpp", "-o", other)
    os.replace(other, exe)          # (a new file at the path, as a build or an upgrade writes it)
    [frame] = sym.user_frames(w.pid, [addr])
    assert not frame.resolved, frame
    # the file that is still there is read as before
    again = workloads([c_programs["plain"]])
    sym.processes.get(again.pid)
    addr = _address_of(sym, again.pid, c_programs["plain"], "stripped_hot_loop")
    again.stop()
    assert sym.user_frames(again.pid, [addr])[0].name == "stripped_hot_loop"
