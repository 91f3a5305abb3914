"""Symbol sources one by one, on real files built here: sizes, PLT, debug files, perf maps, caches."""

from __future__ import annotations

import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from hotstack.symbols.cache import ByteLRU
from hotstack.symbols.debugfile import candidate_paths, crc32_of, find_debug_file
from hotstack.symbols.demangle import Demangler
from hotstack.symbols.elf import ElfFile
from hotstack.symbols.perfmap import PerfMap, parse_perf_map
from hotstack.symbols.symtab import SymbolTable

from .conftest import WORKLOADS, need, run

C_SOURCE = r"""
#include <stdio.h>
__attribute__((noinline, aligned(256))) int first_function(int x) { return x * 3 + 1; }
__attribute__((noinline, aligned(256))) int second_function(int x) { puts("hi"); return x + 2; }
int main(int argc, char **argv) { return first_function(argc) + second_function(argc); }
"""


@pytest.fixture(scope="module")
def c_binary(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("c")
    (out / "prog.c").write_text(C_SOURCE)
    run(need("gcc"), "-O1", "-g", "-Wl,--build-id", out / "prog.c", "-o", out / "prog")
    return out / "prog"


def _nm(path: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for line in run("nm", "-S", path).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            out[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return out


def test_symbol_sizes_are_respected(c_binary):
    syms = _nm(c_binary)
    start, size = syms["first_function"]
    assert syms["second_function"][0] - (start + size) > 16     # alignment leaves a gap
    with ElfFile(str(c_binary)) as elf:
        table = SymbolTable(elf)
        inside, last, past = table.lookup_many([start, start + size - 1, start + size])
    assert inside == ("first_function", 0)
    assert last == ("first_function", size - 1)
    assert past is None          # past the end of a symbol is not that symbol


def test_the_entry_code_of_a_program_or_the_loader_is_named_start(c_binary, tmp_path):
    """Where no symbol covers a program's or the dynamic loader's entry code (a stripped program;
    glibc's ld.so, whose `_start`/`_dl_start_user` is in no symbol table: the root frame of every
    process still in the loader), it is `_start`: the FDE's range where one starts at the entry,
    else up to the next function the CFI index lists. Not past that, and not in a shared library."""
    stripped = tmp_path / "prog.stripped"
    run("strip", "-o", stripped, c_binary)
    start, size = _nm(c_binary)["_start"]
    with ElfFile(str(stripped)) as elf:
        assert elf.entry == start
        table = SymbolTable(elf)
        assert table.lookup_many([start, start + size - 1, start + size]) == [("_start", 0), ("_start", size - 1), None]
    loader = next(p for p in sorted(Path("/usr/lib").glob("*-linux-gnu/ld-linux*.so*")) if p.is_file())
    with ElfFile(str(loader)) as elf:
        table = SymbolTable(elf)
        starts, _fdes = elf.function_index()
        after = int(starts[starts > elf.entry][0])          # the next function with CFI
        assert table.lookup_many([elf.entry + 8]) == [("_start", 8)]
        assert table.lookup_many([after])[0] != ("_start", after - elf.entry)
    lib = tmp_path / "libentry.so"
    run(need("gcc"), "-shared", "-fPIC", "-x", "c", "-", "-o", lib, input="int f(int x) { return x + 1; }\n")
    with ElfFile(str(lib)) as elf:
        assert elf.entry_code() is None and all(
            found is None or found[0] != "_start" for found in SymbolTable(elf).lookup_many([elf.entry]))


def test_few_addresses_are_looked_up_as_a_batch_would_be():
    """Small batches take the scalar path (SCALAR_BATCH): same answers as the vectorized one on
    libc, at every symbol's first and last byte, one past its end, and between symbols."""
    libc = next((p for p in ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6",
                             "/lib/x86_64-linux-gnu/libc.so.6") if os.path.exists(p)), None)
    if libc is None:
        pytest.skip("no libc.so.6 at a Debian path")
    with ElfFile(libc) as elf:
        table = SymbolTable(elf)
        starts, ends = table.values.tolist(), table._ends.tolist()
        queries = [q for s, e in zip(starts, ends) for q in (s, e - 1, e)] + [0, starts[0] - 1, 1 << 63]
        batched = table.lookup_many(queries)
        assert len(queries) > 4 * 1000 and sum(r is None for r in batched) > 0
        assert sum(r is not None for r in batched) > 2 * len(starts) - 1
        one_by_one = [found for q in queries for found in table.lookup_many([q])]
    assert one_by_one == batched


def test_plt_entries_are_named(c_binary):
    objdump = run("objdump", "-d", c_binary).stdout
    line = next(ln for ln in objdump.splitlines() if ln.endswith("<puts@plt>:"))
    address = int(line.split()[0], 16)
    with ElfFile(str(c_binary)) as elf:
        assert SymbolTable(elf).lookup_many([address + 4])[0] == ("puts@plt", 4)


def _split_debug(c_binary: Path, tmp: Path) -> tuple[Path, Path]:
    debug = tmp / "prog.debug"
    run("objcopy", "--only-keep-debug", c_binary, debug)
    stripped = tmp / "prog.stripped"
    run("strip", c_binary, "-o", stripped)
    linked = tmp / "prog"
    run("objcopy", f"--add-gnu-debuglink={debug}", stripped, linked)
    return linked, debug


def test_debuglink_found_and_crc_checked(c_binary, tmp_path):
    linked, debug = _split_debug(c_binary, tmp_path)
    start = _nm(c_binary)["first_function"][0]
    with ElfFile(str(linked)) as elf:
        name, crc = elf.debuglink()
        assert name == "prog.debug" and crc == zlib.crc32(debug.read_bytes())
        assert SymbolTable(elf).lookup_many([start])[0] is None      # stripped: not named alone
        found, refused = find_debug_file(elf, str(linked))
        assert found is not None and found.path == str(debug) and not refused
        assert crc32_of(found) == crc
        assert SymbolTable(elf, found).lookup_many([start])[0] == ("first_function", 0)
        found.close()
        # A debug file that changed after linking has another CRC: refused, with the reason.
        with open(debug, "ab") as f:
            f.write(b"\0")
        found, refused = find_debug_file(elf, str(linked))
        assert found is None
        assert any("CRC" in r for r in refused), refused


def test_debug_file_search_order_is_gdbs():
    paths = candidate_paths("/lib/x86_64-linux-gnu/libc.so.6", "0123456789abcdef", "libc.so.6.debug")
    assert [p for p, _ in paths] == [
        "/usr/lib/debug/.build-id/01/23456789abcdef.debug",
        "/lib/x86_64-linux-gnu/libc.so.6.debug",
        "/lib/x86_64-linux-gnu/.debug/libc.so.6.debug",
        "/usr/lib/debug/lib/x86_64-linux-gnu/libc.so.6.debug",
    ]
    # A link may not leave its directory.
    assert [p for p, _ in candidate_paths("/a/b", "", "../../etc/passwd")] == []


def test_build_id_debug_file_in_a_debug_root(c_binary, tmp_path):
    _, debug = _split_debug(c_binary, tmp_path)
    stripped = tmp_path / "prog.stripped"
    with ElfFile(str(stripped)) as elf:
        build_id = elf.build_id()
        root = tmp_path / "debugroot"
        target = root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
        target.parent.mkdir(parents=True)
        shutil.copy(debug, target)
        found, _ = find_debug_file(elf, "/nowhere/prog.stripped", debug_dirs=(str(root),))
        assert found is not None and found.build_id() == build_id
        found.close()
        # A file with another build id under that name is refused.
        shutil.copy(WORKLOADS.parent / "__init__.py", target)
        found, refused = find_debug_file(elf, "/nowhere/prog.stripped", debug_dirs=(str(root),))
        assert found is None and refused


def test_debuglink_to_itself_does_not_loop(c_binary, tmp_path):
    exe = tmp_path / "selfish"
    # Link to a file of the same name, then rename so the link names the file itself.
    shutil.copy(c_binary, tmp_path / "selfish.tmp")
    run("objcopy", f"--add-gnu-debuglink={c_binary}", tmp_path / "selfish.tmp", exe)
    data = bytearray(exe.read_bytes())
    pos = data.find(b"prog\0")
    data[pos:pos + 5] = b"self\0"            # link name "self", then make "self" the file itself
    exe.write_bytes(bytes(data))
    os.link(exe, tmp_path / "self")
    with ElfFile(str(exe)) as elf:
        found, refused = find_debug_file(elf, str(exe))
    assert found is None
    assert any("itself" in r for r in refused), refused


def test_perf_map_parsing_last_line_wins_and_garbage_is_ignored():
    text = (b"1000 10 first\n"
            b"garbage line\n"
            b"zz 10 bad hex\n"
            b"2000 0 zero size\n"
            b"1000 20 replaced [js] with spaces\n"
            b"3000 8 LazyCompile:~crunch /x.js:1\n")
    starts, sizes, names = parse_perf_map(text)
    assert starts.tolist() == [0x1000, 0x3000]
    assert names == ["replaced [js] with spaces", "LazyCompile:~crunch /x.js:1"]


def test_perf_map_reloads_when_the_file_grows(tmp_path):
    path = tmp_path / "perf-1.map"
    path.write_text("1000 10 a\n")
    pm = PerfMap(str(path))
    assert pm.refresh() and pm.lookup_many([0x1005, 0x1010]) == ["a", None]
    with open(path, "a") as f:
        f.write("2000 10 b\n")
    os.utime(path, ns=(1, 1))
    assert pm.refresh() and pm.lookup_many([0x2001]) == ["b"] and pm.loads == 2
    assert not PerfMap(str(tmp_path / "missing.map")).refresh()


def test_byte_lru_evicts_oldest_and_counts():
    evicted = []
    cache = ByteLRU(100, size_of=len, on_evict=lambda k, v: evicted.append(k))
    cache.put("a", "x" * 40)
    cache.put("b", "x" * 40)
    assert cache.get("a") is not None          # a is now the most recent
    cache.put("c", "x" * 40)                   # 120 > 100: b goes
    assert evicted == ["b"] and "a" in cache and "c" in cache
    assert cache.get("b") is None
    assert (cache.stats.hits, cache.stats.misses, cache.stats.evictions, cache.stats.bytes) == (1, 1, 1, 80)
    cache.put("huge", "x" * 1000)              # larger than the budget: kept alone
    assert len(cache) == 1 and cache.get("huge") is not None


@pytest.mark.parametrize("mode,expected", [
    ("none", "_ZN2ns6WorkerIiE3runERKSt6vectorIiSaIiEE"),
    ("simplified", "ns::Worker::run"),
    ("templates", "ns::Worker<int>::run"),
    ("full", "ns::Worker<int>::run(std::vector<int, std::allocator<int> > const&)"),
])
def test_demangle_modes_cpp(mode, expected):
    assert Demangler(mode)("_ZN2ns6WorkerIiE3runERKSt6vectorIiSaIiEE") == expected


@pytest.mark.parametrize("mangled,simplified,full", [
    ("_ZN4core3fmt9Formatter3pad17h0123456789abcdefE", "core::fmt::Formatter::pad", "core::fmt::Formatter::pad"),
    ("_RINvCsaHcBpJ2hRyj_4test3fooNtNtCs1_5alloc6string6StringEB2_", "test::foo",
     "test::foo::<alloc::string::String>"),
    ("_Z3maxIiET_S0_S0_", "max", "int max<int>(int, int)"),
    ("_ZN3app4workIdEEvT_.cold", "app::work", "void app::work<double>(double)"),
    ("_RNvMs4_NtCsgY6Mt91CT9J_14rustc_demangle2v0NtB5_7Printer30print_path_maybe_open_generics",
     "rustc_demangle::v0::Printer::print_path_maybe_open_generics",
     "<rustc_demangle::v0::Printer>::print_path_maybe_open_generics"),
    ("plain_c_function", "plain_c_function", "plain_c_function"),
    ("_Zgarbage", "_Zgarbage", "_Zgarbage"),
])
def test_demangle_rust_cpp_and_others(mangled, simplified, full):
    assert Demangler("simplified")(mangled) == simplified
    assert Demangler("full")(mangled) == full


def test_demangle_rejects_unknown_mode():
    from hotstack.errors import HotstackError

    with pytest.raises(HotstackError, match="none, simplified, templates, full"):
        Demangler("fancy")


def test_file_truncated_in_place_is_noticed(c_binary, tmp_path):
    copy = tmp_path / "victim"
    shutil.copy(c_binary, copy)
    elf = ElfFile(str(copy))
    assert elf.intact()
    replaced = tmp_path / "victim.new"
    shutil.copy(c_binary, replaced)
    os.replace(replaced, copy)          # replaced by rename: our mapping keeps the old inode
    assert elf.intact()
    elf.close()
    elf = ElfFile(str(copy))
    with open(copy, "r+b") as f:
        f.truncate(100)                 # same inode, shorter: reading the mapping would SIGBUS
    assert not elf.intact()
    elf.close()


def test_unreadable_rust_name_stays_mangled_and_prints_nothing(capsys):
    # A real std symbol (a `dyn for<'a> Fn` binder) that rust-demangler 1.0 cannot read.
    name = ("_RINvNtCsgEmfK2I1SDS_4core3ptr13drop_in_placeINtNtCslNYArtu3iFV_5alloc5boxed3BoxDG0_INtNtNtB4_3ops"
            "8function2FnTRL1_INtNtCsjrHSEGnQ3l9_3std5panic13PanicHookInfoL0_EEEp6OutputuNtNtB4_6marker4Sync"
            "NtB2N_4SendEL_EEB1T_")
    assert Demangler("full")(name) == name
    assert capsys.readouterr().out == ""


def _mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and line[0] in "0123456789abcdef":
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_released_pages_leave_the_resident_set(tmp_path):
    """A long-lived mapping keeps every page a lookup touched; release_pages gives them back and
    later reads still see the file's bytes."""
    import numpy as np

    path = tmp_path / "big.elf"
    header = b"\x7fELF\x02\x01\x01" + bytes(57)
    body = np.arange(1 << 21, dtype="<u4")          # 8 MiB
    path.write_bytes(header + body.tobytes())
    elf = ElfFile(str(path))
    try:
        view = np.frombuffer(elf.view(64, body.nbytes), dtype="<u4")
        assert int(view.sum(dtype=np.uint64)) == int(body.sum(dtype=np.uint64))
        touched = _mapped_rss_kb(path)
        assert touched >= 7 * 1024, touched
        elf.release_pages()
        assert _mapped_rss_kb(path) <= 256, _mapped_rss_kb(path)
        assert int(view[12345]) == 12345 and int(view.sum(dtype=np.uint64)) == int(body.sum(dtype=np.uint64))
        del view
    finally:
        elf.close()


def test_hashing_a_file_range_sees_every_byte_once_and_leaves_few_pages_resident(tmp_path):
    """hash_into hashes slices and lets each slice's pages go: the digest is that of the bytes
    read at once, for ranges that start and end off page and slice boundaries, and the file's
    pages do not stay resident."""
    import hashlib

    import numpy as np

    path = tmp_path / "big.elf"
    header = b"\x7fELF\x02\x01\x01" + bytes(57)
    data = header + np.random.default_rng(7).integers(0, 256, (9 << 20) + 4321, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    elf = ElfFile(str(path))
    try:
        for offset, size in ((0, len(data)), (4097, (4 << 20) + 1), (123, 5000), (64, len(data) - 64)):
            h = hashlib.sha256()
            elf.hash_into(h, offset, size)
            assert h.hexdigest() == hashlib.sha256(data[offset:offset + size]).hexdigest(), (offset, size)
            assert _mapped_rss_kb(path) <= 4 * 1024 + 256, _mapped_rss_kb(path)
    finally:
        elf.close()


def test_a_segment_address_past_2_to_the_64_gives_no_address(c_binary, tmp_path):
    """A damaged or hostile program header (a PT_LOAD's vaddr near 2**64): the addresses it would
    give are past what a frame, pprof or OTLP can carry (an export failed on one): none is given."""
    import struct
    data = bytearray(c_binary.read_bytes())
    phoff, phentsize = struct.unpack_from("<Q", data, 0x20)[0], struct.unpack_from("<H", data, 0x36)[0]
    with ElfFile(str(c_binary)) as elf:
        text = next(s for s in elf.segments if s.flags & 1)
        inside = text.offset + min(text.filesz, 16) - 1
        assert elf.file_offset_to_vaddr(inside) is not None
    for i in range(struct.unpack_from("<H", data, 0x38)[0]):
        at = phoff + i * phentsize
        p_type, p_flags, p_offset = struct.unpack_from("<IIQ", data, at)
        if p_type == 1 and p_offset == text.offset:
            struct.pack_into("<Q", data, at + 16, (1 << 64) - 8)      # p_vaddr: its 16th byte past 2**64
    broken = tmp_path / "broken"
    broken.write_bytes(bytes(data))
    with ElfFile(str(broken)) as elf:
        assert elf.file_offset_to_vaddr(inside) is None
