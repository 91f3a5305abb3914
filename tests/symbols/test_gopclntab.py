"""The Go pc-line table reader on every layout: synthesized old ones, and the local Go's real one."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hotstack.symbols.elf import ElfFile
from hotstack.symbols.gopclntab import GoPclntab, GoPclntabError, find_pclntab
from hotstack.symbols.symtab import SymbolTable

from . import gopclntab_synth
from .conftest import WORKLOADS, need

FUNCS = [
    {"entry": 0x401000, "name": "runtime.main", "file": "/go/src/runtime/proc.go",
     "lines": [(250, 0x401010), (251, 0x401040)]},
    {"entry": 0x401040, "name": "main.crunchNumbers", "file": "/src/main.go",
     "lines": [(9, 0x401050), (11, 0x401070), (12, 0x401080)]},
    {"entry": 0x401080, "name": "main.main", "file": "/src/main.go", "lines": [(17, 0x4010a0)]},
]


@pytest.mark.parametrize("version", ["1.2", "1.16", "1.18", "1.20"])
def test_synthesized_layouts(version):
    table = GoPclntab(gopclntab_synth.build(version, FUNCS))
    assert table.version == version
    assert len(table) == 3
    found = table.lookup_many([0x401000, 0x401045, 0x40107f, 0x401080, 0x40109f, 0x4010a0, 0x400fff])
    assert found == [("runtime.main", 0), ("main.crunchNumbers", 5), ("main.crunchNumbers", 0x3f),
                     ("main.main", 0), ("main.main", 0x1f), None, None]
    assert table.line(0x401045) == ("/src/main.go", 9)
    assert table.line(0x401055) == ("/src/main.go", 11)
    assert table.line(0x401075) == ("/src/main.go", 12)
    assert table.line(0x401011) == ("/go/src/runtime/proc.go", 251)


def test_text_start_from_the_caller_when_the_header_has_none():
    data = gopclntab_synth.build("1.20", FUNCS, text_start=0)
    # entries were written relative to 0: give the real .text address instead
    moved = [dict(f, entry=f["entry"] - 0x401000,
                  lines=[(ln, end - 0x401000) for ln, end in f["lines"]]) for f in FUNCS]
    data = gopclntab_synth.build("1.20", moved, text_start=0)
    table = GoPclntab(data, text_start=0x401000)
    assert table.lookup_many([0x401045])[0] == ("main.crunchNumbers", 5)


@pytest.mark.parametrize("version", ["1.2", "1.16", "1.18", "1.20"])
def test_truncated_and_corrupt_tables_never_crash(version):
    data = gopclntab_synth.build(version, FUNCS)
    for cut in range(0, len(data), 7):
        try:
            table = GoPclntab(data[:cut])
        except GoPclntabError:
            continue
        table.lookup_many([0x401000, 0x401045, 0x401090])
        table.line(0x401045)
    flipped = bytearray(data)
    flipped[8:16] = (10**9).to_bytes(8, "little")      # absurd function count
    with pytest.raises(GoPclntabError):
        GoPclntab(bytes(flipped))


@pytest.fixture(scope="module")
def go_binaries(tmp_path_factory) -> dict[str, Path]:
    go = need("go")
    out = tmp_path_factory.mktemp("go")
    src = out / "src"
    src.mkdir()
    shutil.copy(WORKLOADS / "hot_go.go", src / "main.go")
    (src / "go.mod").write_text("module example.com/hotgo\n\ngo 1.18\n")
    env = {**os.environ, "CGO_ENABLED": "0"}
    bins = {}
    for name, args in (("plain", []), ("stripped", ["-ldflags=-s -w"]), ("pie", ["-buildmode=pie"])):
        bins[name] = out / name
        subprocess.run([go, "build", *args, "-o", str(bins[name]), "."], cwd=src, env=env, check=True)
    return bins


@pytest.mark.parametrize("kind", ["plain", "pie"])
def test_real_go_binary_matches_its_symtab(go_binaries, kind):
    with ElfFile(str(go_binaries[kind])) as elf:
        go = find_pclntab(elf)
        assert go is not None and go.version in ("1.18", "1.20")   # Debian 12's Go is 1.19
        symtab = SymbolTable(elf)
        compared = 0
        for i in range(len(symtab)):
            name = symtab.name(i)
            if name.endswith(".abi0") or name in ("runtime.text", "runtime.etext"):
                continue   # assembly wrappers carry an ABI suffix only in .symtab
            found = go.lookup_many([int(symtab.values[i])])[0]
            if found is None:
                continue
            # the linker writes "·" where .symtab has "."
            assert (found[0].replace("\u00b7", "."), found[1]) == (name, 0), (hex(int(symtab.values[i])), name)
            compared += 1
        assert compared > 1000
        i = go.index_of(int(symtab.values[[symtab.name(k) for k in range(len(symtab))].index("main.crunchNumbers")]))
        file, line = go.line(int(go.entries[i]) + 8)
        assert file.endswith("main.go") and 8 <= line <= 14


def test_stripped_go_binary(go_binaries):
    kind = "stripped"   # same code as "plain", without .symtab
    with ElfFile(str(go_binaries["plain"])) as plain:
        reference = find_pclntab(plain)
        names = {reference.name(i): int(reference.entries[i]) - plain.section(".text").addr
                 for i in range(len(reference))}
    with ElfFile(str(go_binaries[kind])) as elf:
        assert elf.section(".symtab") is None
        go = find_pclntab(elf)
        assert go is not None and len(go) == len(reference)
        text = elf.section(".text").addr
        entry = text + names["main.crunchNumbers"]
        assert go.lookup_many([entry + 3])[0] == ("main.crunchNumbers", 3)


def test_table_found_by_scanning_when_the_section_has_no_name(go_binaries, tmp_path):
    """PIE binaries of older Go keep the table inside .data.rel.ro: found by its magic number."""
    renamed = tmp_path / "renamed"
    subprocess.run(["objcopy", "--rename-section", ".gopclntab=.data.rel.ro", str(go_binaries["plain"]),
                    str(renamed)], check=True)
    with ElfFile(str(go_binaries["plain"])) as plain:
        reference = find_pclntab(plain)
        entry = int(reference.entries[reference.nfunc // 2])
        expected = reference.lookup_many([entry + 1])
    with ElfFile(str(renamed)) as elf:
        assert elf.section(".gopclntab") is None
        go = find_pclntab(elf)
        assert go is not None and len(go) == len(reference)
        assert go.lookup_many([entry + 1]) == expected


def test_go_symbols_off_leaves_a_stripped_go_binary_unnamed(go_binaries):
    """pyroscope.ebpf's go_enabled = false: .gopclntab is not read, so a stripped Go binary's
    functions stay module+offset; on (the default) they are named."""
    from hotstack.procs import ProcessTable
    from hotstack.symbols.symbolizer import Symbolizer

    with ElfFile(str(go_binaries["plain"])) as plain:
        reference = find_pclntab(plain)
        entry = next(int(reference.entries[i]) for i in range(len(reference))
                     if reference.name(i) == "main.crunchNumbers")
    proc = subprocess.Popen([str(go_binaries["stripped"])])     # not PIE: ELF address = process address
    try:
        time.sleep(0.3)
        on = Symbolizer(ProcessTable()).user_frames(proc.pid, [entry + 3])[0]
        off = Symbolizer(ProcessTable(), go_symbols=False).user_frames(proc.pid, [entry + 3])[0]
    finally:
        proc.kill()
        proc.wait()
    assert (on.name, on.resolved) == ("main.crunchNumbers", True)
    assert not off.resolved and "crunchNumbers" not in off.name
