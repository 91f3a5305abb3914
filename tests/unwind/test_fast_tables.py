"""The vectorized table builder and the content-keyed table cache (no BPF needed)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import numpy as np
import pytest

from hotstack.symbols.elf import ElfFile
from hotstack.unwind import cfi, cfi_rows, kernel_tables
from hotstack.unwind.builder import build_table_fast
from hotstack.unwind.kernel_tables import KIND_FP_GO, build_file_table, content_key
from hotstack.unwind.table_cache import TableCache
from hotstack.unwind.table import build_table

from ..conftest import compile_c
from .conftest import HERE


def expanded(table):
    rules = np.array([(r.kind, r.cfa_offset, r.rbp_offset, r.ra_offset) for r in table.rules],
                     np.int64).reshape(-1, 4)
    return table.pcs, rules[table.rule_ids.astype(np.int64)]


def system_libraries() -> list[str]:
    out = []
    for pattern in ("/usr/lib/*-linux-gnu/libc.so.6", "/usr/lib/*-linux-gnu/libpython3*.so.1.0",
                    "/usr/lib/*-linux-gnu/libstdc++.so.6", "/usr/lib/*-linux-gnu/ld-linux*.so.2", "/usr/bin/xz"):
        out.extend(sorted(glob.glob(pattern))[:1])
    return out


@pytest.fixture(scope="session")
def built_binaries(build_dir):
    src = HERE / "workloads" / "chain.c"
    return [compile_c(src, build_dir / "chain_fast_nofp", "-O2", "-fomit-frame-pointer", "-pthread"),
            compile_c(src, build_dir / "chain_fast_fp", "-O0", "-fno-omit-frame-pointer", "-pthread"),
            compile_c(src, build_dir / "chain_fast_dbg", "-O2", "-g", "-fno-asynchronous-unwind-tables",
                      "-pthread")]


@pytest.mark.parametrize("which", range(5))
def test_same_rows_as_the_python_builder_on_system_libraries(which):
    files = system_libraries()
    if which >= len(files):
        pytest.skip("no such library here")
    elf = ElfFile(files[which])
    old, new = build_table(elf), build_table_fast(elf)
    old_pcs, old_rules = expanded(old)
    new_pcs, new_rules = expanded(new)
    assert len(old_pcs) > 100
    assert np.array_equal(old_pcs, new_pcs)
    assert np.array_equal(old_rules, new_rules)
    assert (old.fdes, old.fp_fdes, old.source) == (new.fdes, new.fp_fdes, new.source)


def test_same_rows_on_binaries_built_here(built_binaries):
    for path in built_binaries:
        elf = ElfFile(str(path))
        old_pcs, old_rules = expanded(build_table(elf))
        new_pcs, new_rules = expanded(build_table_fast(elf))
        assert np.array_equal(old_pcs, new_pcs), path
        assert np.array_equal(old_rules, new_rules), path
    # the -g build without .eh_frame has its rows from .debug_frame
    assert "debug_frame" in build_table_fast(ElfFile(str(built_binaries[2]))).source


def test_kernel_rows_are_file_offsets_with_a_stop_at_start(built_binaries):
    elf = ElfFile(str(built_binaries[0]))
    table = build_file_table(elf)
    assert np.all(table.offsets[1:] > table.offsets[:-1])
    seg = next(s for s in elf.segments if s.flags & 1)
    # every row lies in the executable segment's file range
    assert table.offsets[0] >= seg.offset and table.offsets[-1] <= seg.offset + seg.filesz
    kinds = table.rules["kind"][table.rule_ids]
    assert (kinds == cfi.KIND_STOP).any(), "_start's undefined return address must be a stop row"


def test_go_functions_get_frame_pointer_rows(build_dir, monkeypatch):
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain")
    src = build_dir / "gofp"
    src.mkdir(exist_ok=True)
    (src / "main.go").write_text("package main\nfunc f(n int) int { if n == 0 { return 0 }; return f(n-1) + 1 }\n"
                                 "func main() { println(f(10)) }\n")
    (src / "go.mod").write_text("module gofp\ngo 1.21\n")
    subprocess.run(["go", "build", "-o", str(src / "gofp"), "."], cwd=src, check=True,
                   env={"HOME": str(build_dir), "GOCACHE": str(build_dir / "gocache"), "PATH": "/usr/bin:/bin:"
                        + shutil.which("go").rsplit("/", 1)[0], "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"})
    from hotstack.symbols.gopclntab import find_pclntab

    elf = ElfFile(str(src / "gofp"))
    table = build_file_table(elf)
    assert ".gopclntab" in table.source
    # Go functions are described by their SP deltas (at each entry: the return address at SP);
    # only the runtime's stack-switching code keeps the Go ABI's frame pointer
    entries = find_pclntab(elf).entries.astype(np.int64)
    seg = next(s for s in elf.segments if s.flags & 1)
    offsets = entries - (seg.vaddr - seg.offset)
    row = np.searchsorted(table.offsets.astype(np.int64), offsets, side="right") - 1
    kinds = table.rules["kind"][table.rule_ids[row]]
    assert len(entries) > 500 and (kinds == cfi.KIND_CFA_SP).mean() > 0.95, np.unique(kinds, return_counts=True)
    kinds_of_rows = table.rules["kind"][table.rule_ids]
    assert 1 <= (kinds_of_rows == KIND_FP_GO).sum() < 0.02 * len(kinds_of_rows)
    assert len({int(r["cfa"]) for r in table.rules if r["kind"] == cfi.KIND_CFA_SP}) > 10   # many frame sizes
    # the file's pages dropped from the resident set after every function read: the same rows
    monkeypatch.setattr(kernel_tables, "GO_RELEASE_EVERY", 1)
    again = build_file_table(ElfFile(str(src / "gofp")))
    assert np.array_equal(again.offsets, table.offsets) and np.array_equal(again.rule_ids, table.rule_ids)
    assert np.array_equal(again.rules, table.rules)


def test_rows_name_their_rules_when_the_rules_mixed_keys_collide(monkeypatch):
    """A part's rows are told apart by one 64-bit mix of their rules' two keys (cfi_rows.RuleIds),
    checked row by row: with a mix that ignores the first key (most rules then share a mix with
    another), the check sends every part to the two-key sort, and the table is the same."""
    elf = ElfFile(system_libraries()[0])
    mixed = build_table_fast(elf)
    monkeypatch.setattr(cfi_rows, "_MIX", np.int64(0))
    sorted_keys = build_table_fast(elf)
    assert len(mixed) > 100 and np.array_equal(mixed.pcs, sorted_keys.pcs)
    assert np.array_equal(expanded(mixed)[1], expanded(sorted_keys)[1])
    assert mixed.rules == sorted_keys.rules and np.array_equal(mixed.rule_ids, sorted_keys.rule_ids)


def test_cache_is_keyed_by_content_not_build_id(tmp_path, built_binaries):
    """Issue 18 item 1: a same-build-id copy with corrupt .eh_frame must never serve the intact file."""
    good = tmp_path / "good"
    shutil.copy(built_binaries[0], good)
    bad = tmp_path / "bad"
    data = bytearray(good.read_bytes())
    elf = ElfFile(str(good))
    eh = elf.section(".eh_frame")
    data[eh.offset + 64: eh.offset + eh.size - 64] = bytes(eh.size - 128)   # wipe the FDEs
    bad.write_bytes(bytes(data))
    good_elf, bad_elf = ElfFile(str(good)), ElfFile(str(bad))
    assert good_elf.build_id() == bad_elf.build_id() and good_elf.build_id()
    assert content_key(good_elf) != content_key(bad_elf)

    cache_dir = tmp_path / "cache"
    first = TableCache(directory=str(cache_dir))
    bad_table = first.get(bad_elf)                    # the corrupt copy is profiled first
    good_table = first.get(good_elf)
    # (the corrupt copy's functions have rows worked out from their code, unwind/code_rows.py: other rows)
    assert len(good_table) != len(bad_table) or (good_table.offsets != bad_table.offsets).any()
    good_rows = len(good_table)
    # a new process (restart): the disk cache gives each file its own rows
    second = TableCache(directory=str(cache_dir))
    assert len(second.get(good_elf)) == good_rows and second.loaded == 1 and second.built == 0
    assert len(second.get(bad_elf)) == len(bad_table)


def test_cache_rejects_a_tampered_file(tmp_path, built_binaries):
    elf = ElfFile(str(built_binaries[0]))
    cache_dir = tmp_path / "cache"
    TableCache(directory=str(cache_dir)).get(elf)
    (path,) = list(cache_dir.iterdir())
    other = ElfFile(str(built_binaries[1]))
    # another file's table written under this file's name: the stored key no longer matches
    TableCache(directory=str(tmp_path / "other")).get(other)
    (other_path,) = list((tmp_path / "other").iterdir())
    shutil.copy(other_path, path)
    again = TableCache(directory=str(cache_dir))
    table = again.get(elf)
    assert again.rejected == 1 and again.built == 1
    assert len(table) == len(build_file_table(elf))
    # garbage bytes: rejected too, never a traceback
    path.write_bytes(b"not a table")
    third = TableCache(directory=str(cache_dir))
    assert len(third.get(elf)) == len(table) and third.rejected == 1
    # the file as written is read back whole; cut short, or one byte of its rules changed (which
    # only the header's checksum tells), it is rejected and built again
    whole = path.read_bytes()
    fourth = TableCache(directory=str(cache_dir))
    kept = fourth.get(elf)
    assert fourth.loaded == 1 and fourth.built == 0 and np.array_equal(kept.offsets, table.offsets)
    assert np.array_equal(kept.rule_ids, table.rule_ids) and np.array_equal(kept.rules, table.rules)
    for damaged in (whole[:-3], whole[:-1] + bytes([whole[-1] ^ 1])):
        path.write_bytes(damaged)
        again = TableCache(directory=str(cache_dir))
        assert len(again.get(elf)) == len(table) and again.rejected == 1 and again.built == 1


def test_a_table_written_for_another_rule_layout_is_rebuilt(tmp_path, built_binaries):
    """A table file of this VERSION whose header was written for another struct nu_rule (a schema
    change that did not bump VERSION) is never read with this layout: its rules would be read
    field for wrong field (every JVM stack ended at its first table rule)."""
    import struct

    from hotstack.unwind import table_cache

    cache_dir = tmp_path / "cache"
    elf = ElfFile(str(built_binaries[0]))
    table = TableCache(directory=str(cache_dir)).get(elf)
    (path,) = cache_dir.iterdir()
    whole = bytearray(path.read_bytes())
    assert struct.unpack_from("<I", whole, 4)[0] == table_cache._FORMAT != TableCache.VERSION
    struct.pack_into("<I", whole, 4, TableCache.VERSION)     # the same version, no layout hash
    path.write_bytes(bytes(whole))
    again = TableCache(directory=str(cache_dir))
    assert len(again.get(elf)) == len(table) and again.loaded == 0 and again.built == 1


def test_tables_of_older_versions_are_removed_at_the_first_save(tmp_path, built_binaries):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    old = [cache_dir / "k4-1a2b-3c4d.npz", cache_dir / "k3-1a2b.npz", cache_dir / "k4-ffff.table"]
    kept = [cache_dir / "notes.txt", cache_dir / "k9x-1.npz"]
    for path in old + kept:
        path.write_bytes(b"x")
    cache = TableCache(directory=str(cache_dir))
    cache.get(ElfFile(str(built_binaries[0])))
    assert not any(p.exists() for p in old) and all(p.exists() for p in kept)
    (table,) = [p for p in cache_dir.iterdir() if p.name.startswith(f"k{TableCache.VERSION}-")]
    assert table.suffix == ".table"


def test_cache_memory_is_bounded(built_binaries):
    files = [ElfFile(f) for f in system_libraries()[:3]]
    cache = TableCache(max_bytes=300_000, directory="")
    for elf in files:
        cache.get(elf)
    assert cache.nbytes <= 300_000 or len(cache._tables) == 1
    assert cache.evicted >= 1


def test_slices_give_the_same_rows_and_bound_memory(monkeypatch):
    """FDEs are evaluated in slices of the section: any slice size gives the same rows, and the
    working arrays follow the slice, not the section (libLLVM's 5 MB .eh_frame peaked at 600 MB)."""
    import tracemalloc

    from hotstack.unwind import fastcfi

    files = [f for f in system_libraries() if "libpython" in f or "libstdc++" in f] or system_libraries()[:1]
    elf = ElfFile(max(files, key=lambda f: ElfFile(f).section(".eh_frame").size))
    size = elf.section(".eh_frame").size
    peaks, tables = {}, {}
    for chunk in (1 << 30, fastcfi.CHUNK_BYTES, 4096):
        monkeypatch.setattr(fastcfi, "CHUNK_BYTES", chunk)
        tracemalloc.start()
        tables[chunk] = expanded(build_table_fast(elf))
        peaks[chunk] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    whole, default, tiny = tables[1 << 30], tables[fastcfi.CHUNK_BYTES], tables[4096]
    for other in (default, tiny):
        assert np.array_equal(whole[0], other[0]) and np.array_equal(whole[1], other[1])
    if size > 2 * fastcfi.CHUNK_BYTES:
        assert peaks[fastcfi.CHUNK_BYTES] < 0.6 * peaks[1 << 30], (size, peaks)
    assert peaks[4096] < 0.6 * peaks[1 << 30], (size, peaks)


def test_compressed_debug_frame_is_inflated_and_a_zip_bomb_is_refused(build_dir, monkeypatch):
    """.debug_frame compressed (gcc -gz, SHF_COMPRESSED) gives the table of the same file with it
    uncompressed; a compressed section that would inflate past MAX_INFLATED is refused (any process's
    file is read: a few KB of zlib can claim gigabytes)."""
    import zlib

    from hotstack.unwind import table as table_module

    src = HERE / "workloads" / "chain.c"
    packed = compile_c(src, build_dir / "chain_gz_debug_frame", "-O2", "-g", "-gz=zlib",
                       "-fno-asynchronous-unwind-tables", "-pthread")
    plain = build_dir / "chain_plain_debug_frame"
    subprocess.run(["objcopy", "--decompress-debug-sections", str(packed), str(plain)], check=True)
    flags = subprocess.run(["readelf", "-SW", str(packed)], capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in flags.splitlines() if " .debug_frame " in ln)
    assert " C" in line.split(".debug_frame", 1)[1], line       # the section is compressed
    a, b = expanded(build_table_fast(ElfFile(str(packed)))), expanded(build_table_fast(ElfFile(str(plain))))
    assert len(a[0]) > 10 and np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])

    monkeypatch.setattr(table_module, "MAX_INFLATED", 1 << 20)
    header = (1).to_bytes(4, "little") + bytes(20)      # Elf64_Chdr, ch_type 1 (zlib)
    assert table_module._decompressed(header + zlib.compress(bytes(1 << 20))) == bytes(1 << 20)
    with pytest.raises(zlib.error):
        table_module._decompressed(header + zlib.compress(bytes((1 << 20) + 1)))
    with pytest.raises(zlib.error):
        table_module._decompressed(b"ZLIB" + bytes(8) + zlib.compress(bytes(8 << 20)))


@pytest.mark.parametrize("which", ["libc.so.6", "python3"])
def test_page_index_finds_the_row_a_whole_table_search_finds(which):
    """The kernel searches one page's rows, found from the page index (bpf/native_unwind.h,
    nu_find_rule): for any offset, the last row at or below it is the one a search of the whole
    table finds, before the first row there is none, and past the last page it is the last row."""
    path = {"libc.so.6": sorted(glob.glob("/usr/lib/*-linux-gnu/libc.so.6"))[0],
            "python3": os.path.realpath("/usr/bin/python3")}[which]
    table = build_file_table(ElfFile(path))
    offsets = table.offsets.astype(np.int64)
    shift = 10
    base, index = table.page_index(shift)
    assert len(index) == (int(offsets[-1]) >> shift) - base + 1
    rng = np.random.default_rng(7)
    probes = np.concatenate([offsets, offsets - 1, offsets + 1, rng.integers(0, int(offsets[-1]) + 4096, 20_000)])

    def kernel_lookup(offset: int) -> int | None:
        page = (offset >> shift) - base
        if page < 0:
            return None
        if page < len(index):
            lo, hi = int(index[page]) & 0xFFFFFFFF, int(index[page]) >> 32
        else:
            lo = hi = len(offsets)
        assert hi - lo <= 1 << shift                   # NU_PAGE_SEARCH_STEPS covers every page
        found = lo + int(np.searchsorted(offsets[lo:hi], offset, side="right"))
        return found - 1 if found > 0 else None

    for offset in probes.tolist():
        whole = int(np.searchsorted(offsets, offset, side="right")) - 1
        assert kernel_lookup(offset) == (whole if whole >= 0 else None), offset


def _rule_at(table, elf, vaddr: int) -> int:
    seg = next(s for s in elf.segments if s.flags & 1 and s.vaddr <= vaddr < s.vaddr + s.filesz)
    i = int(np.searchsorted(table.offsets, vaddr - seg.vaddr + seg.offset, side="right")) - 1
    return int(table.rules["kind"][table.rule_ids[i]])


def test_the_dynamic_loaders_entry_without_cfi_is_a_stop_and_a_librarys_entry_is_not(build_dir):
    """glibc's ld.so has no CFI for its entry code (_start, _dl_start_user): a return address there
    is the outermost frame of a process still in the loader, not a frame to walk on by frame
    pointers (which ended it as a bad frame pointer: a whole stack counted short). A shared library
    whose e_entry points at code without CFI (some linkers set it to the start of .text) keeps that
    code walkable."""
    loaders = sorted(glob.glob("/usr/lib/*-linux-gnu/ld-linux*.so.2"))
    if not loaders:
        pytest.skip("no glibc dynamic loader here")
    with ElfFile(loaders[0]) as elf:
        assert elf.entry and not elf.has_interp and not elf.needs_libraries()
        assert _rule_at(build_file_table(elf), elf, elf.entry) == cfi.KIND_STOP
    # the entry function without CFI, linked first; another one with CFI after it (rows to bound it)
    (build_dir / "entry_no_cfi.c").write_text("int no_cfi(int x) { return x * 3 + 1; }\n")
    (build_dir / "entry_cfi.c").write_text("int with_cfi(int x) { return x * 5 + 2; }\n")
    subprocess.run(["cc", "-O2", "-fPIC", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-c",
                    str(build_dir / "entry_no_cfi.c"), "-o", str(build_dir / "entry_no_cfi.o")], check=True)
    subprocess.run(["cc", "-O2", "-fPIC", "-c", str(build_dir / "entry_cfi.c"), "-o", str(build_dir / "entry_cfi.o")],
                   check=True)
    lib = build_dir / "libentry.so"
    subprocess.run(["cc", "-shared", "-Wl,-e,no_cfi", "-Wl,--no-as-needed", str(build_dir / "entry_no_cfi.o"),
                    str(build_dir / "entry_cfi.o"), "-lm", "-o", str(lib)], check=True)
    with ElfFile(str(lib)) as elf:
        assert elf.entry and elf.needs_libraries() and not elf.has_interp
        assert _rule_at(build_file_table(elf), elf, elf.entry) != cfi.KIND_STOP
