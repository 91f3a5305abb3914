"""Probe links: parsing and ELF resolution, and their errors (no BPF needed)."""

from __future__ import annotations

import pytest

from hotstack.errors import ConfigError
from hotstack.sampling.probe_links import parse_probe_link, parse_probe_links, resolve_uprobe
from hotstack.symbols.elf import ElfFile

from .conftest import libc_path_of


@pytest.fixture(scope="module")
def libc(tmp_path_factory) -> str:
    import os
    return libc_path_of(os.getpid())


def test_parse_kinds():
    assert parse_probe_link("kprobe:do_sys_open").symbol == "do_sys_open"
    link = parse_probe_link("uretprobe:/usr/lib/libc.so.6:malloc")
    assert (link.kind, link.path, link.symbol, link.is_user, link.is_return) == (
        "uretprobe", "/usr/lib/libc.so.6", "malloc", True, True)


def test_legacy_u_probe_links_only_without_probe_links():
    assert [l.text for l in parse_probe_links([], ["/bin/x:main"])] == ["uprobe:/bin/x:main"]
    assert [l.text for l in parse_probe_links(["kprobe:vfs_read"], ["/bin/x:main"])] == ["kprobe:vfs_read"]


@pytest.mark.parametrize("text,expected", [
    ("fprobe:vfs_read", "unknown probe type 'fprobe'"),
    ("vfs_read", "unknown probe type 'vfs_read'"),
    ("uprobe:malloc", "expected uprobe:/path/to/binary:SYMBOL"),
    ("kprobe:", "expected kprobe:KERNEL_FUNCTION"),
])
def test_bad_syntax_names_the_link(text, expected):
    with pytest.raises(ConfigError) as e:
        parse_probe_link(text)
    assert text in str(e.value) and expected in str(e.value)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


def test_missing_path_missing_symbol_not_elf(libc, tmp_path):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a binary\n" * 10)
    cases = [
        (f"uprobe:{tmp_path}/absent:malloc", "no such file"),
        (f"uprobe:{libc}:no_such_function_here", "no function 'no_such_function_here'"),
        (f"uprobe:{text_file}:main", "is not a usable ELF file"),
    ]
    for text, expected in cases:
        with pytest.raises(ConfigError) as e:
            resolve_uprobe(parse_probe_link(text))
        assert text in str(e.value) and expected in str(e.value), str(e.value)


def test_versioned_names_resolve_to_the_dynsym_address(libc):
    plain = resolve_uprobe(parse_probe_link(f"uprobe:{libc}:malloc"))
    versioned = resolve_uprobe(parse_probe_link(f"uprobe:{libc}:malloc@@GLIBC_2.2.5"))
    assert plain.address == versioned.address and plain.offset == versioned.offset
    with pytest.raises(ConfigError):
        resolve_uprobe(parse_probe_link(f"uprobe:{libc}:malloc@@GLIBC_0.1"))
    # The file offset maps back to the symbol's address through the load segments.
    with ElfFile(libc) as elf:
        assert elf.file_offset_to_vaddr(plain.offset) == plain.address
