"""KernelSymbols (numpy parse of /proc/kallsyms) against a plain line-by-line reference: the real
kernel's symbols, every one of them and addresses between them, and the odd lines of the format."""

from __future__ import annotations

import bisect
import random
import shutil

import pytest

from hotstack.symbols import kallsyms
from hotstack.symbols.kallsyms import KernelSymbols


def reference(text: bytes) -> tuple[list[int], list[str]]:
    """Text symbols with an address, sorted by address (stable: file order among equals)."""
    symbols = []
    for line in text.split(b"\n"):
        parts = line.split()
        if len(parts) < 3 or parts[1] not in (b"t", b"T", b"w", b"W"):
            continue
        try:
            address = int(parts[0], 16)
        except ValueError:
            continue
        if address:
            symbols.append((address, parts[2].decode()))
    symbols.sort(key=lambda s: s[0])
    return [a for a, _ in symbols], [n for _, n in symbols]


def reference_lookup(ref: tuple[list[int], list[str]], address: int) -> str | None:
    i = bisect.bisect_right(ref[0], address) - 1
    return ref[1][i] if i >= 0 else None


@pytest.fixture(scope="module")
def kernel_copy(tmp_path_factory):
    """One copy of /proc/kallsyms: the kernel's list changes as BPF programs come and go, and both
    parsers must read the same lines."""
    path = tmp_path_factory.mktemp("kallsyms") / "kallsyms"
    with open("/proc/kallsyms", "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def test_real_kernel_every_symbol_and_between(kernel_copy):
    ref = reference(kernel_copy.read_bytes())
    if not ref[0]:
        pytest.skip("kallsyms addresses are hidden (kptr_restrict): run as root")
    symbols = KernelSymbols.load(str(kernel_copy))
    assert len(symbols) == len(ref[0]) > 10_000
    assert symbols.addresses.tolist() == ref[0]
    rng = random.Random(12)
    lo, hi = ref[0][0], ref[0][-1]
    queries = ref[0] + [a - 1 for a in ref[0]] + [rng.randrange(lo - 4096, hi + 4096) for _ in range(100_000)]
    assert symbols.lookup_many(queries) == [reference_lookup(ref, q) for q in queries]
    assert symbols.lookup(0) is None


ODD = (b"ffffffff81000000 T _stext\n"
       b"0000000000000000 T hidden\n"                    # kptr_restrict: no address
       b"ffffffff81000100 D data_symbol\n"               # not text
       b"ffffffff81000200 t local_fn\n"
       b"ffffffff81000200 W weak_alias\n"                # same address: the later line names it
       b"ffffffffc0000000 t mod_fn\t[some_module]\n"
       b"ffffffffc0000010 T mod_other\t[other]\n"
       b"not a line at all\n"
       b"ffffffff81000280 T after_a_bad_line\n"
       b"\n"
       b"ffffffffzz000000 T bad_hex\n"
       b"ffffffff81000300 T no_newline_at_end")


@pytest.mark.parametrize("chunk", [16, 40, 1 << 20])
def test_odd_lines_and_chunk_boundaries(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(kallsyms, "_CHUNK", chunk)
    path = tmp_path / "kallsyms"
    path.write_bytes(ODD)
    symbols = KernelSymbols.load(str(path))
    ref = reference(ODD)
    assert symbols.addresses.tolist() == ref[0]
    assert [symbols.name(i) for i in range(len(symbols))] == ref[1] == [
        "_stext", "local_fn", "weak_alias", "after_a_bad_line", "no_newline_at_end", "mod_fn", "mod_other"]
    assert symbols.lookup(0xffffffff81000250) == "weak_alias"
    assert symbols.lookup(0xffffffff81000290) == "after_a_bad_line"
    assert symbols.lookup(0xffffffffc0000005) == "mod_fn"
    assert symbols.lookup(0xffffffff80ffffff) is None


def test_empty_and_hidden(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_bytes(b"")
    assert len(KernelSymbols.load(str(path))) == 0
    path.write_bytes(b"0000000000000000 T a\n0000000000000000 t b\n")
    hidden = KernelSymbols.load(str(path))
    assert len(hidden) == 0 and hidden.lookup_many([1, 2]) == [None, None]


def test_32_bit_addresses(tmp_path):
    text = b"c1000000 T start_kernel\nc1000040 t helper\nf8000000 t mod_fn\t[mod]\n00000000 T hidden\n"
    path = tmp_path / "kallsyms"
    path.write_bytes(text)
    symbols = KernelSymbols.load(str(path))
    assert symbols.addresses.tolist() == reference(text)[0] == [0xc1000000, 0xc1000040, 0xf8000000]
    assert symbols.lookup_many([0xc1000041, 0xf8000010, 0xc0000000]) == ["helper", "mod_fn", None]


def test_kernel_frames_are_remembered_with_leaf_and_return_addresses_apart(tmp_path):
    """The symbolizer remembers kernel frames by address: a leaf is looked up at its address, a
    return address one byte before (the call), so the same address names two functions where a
    function starts right after a call; a second stack is named from what the first looked up,
    and a reloaded symbol table starts afresh."""
    from hotstack.procs import ProcessTable
    from hotstack.symbols.symbolizer import Symbolizer

    text = tmp_path / "kallsyms"
    text.write_bytes(b"ffffffff81000000 T first\nffffffff81000010 T second\n")
    kernel = KernelSymbols.load(str(text))
    sym = Symbolizer(ProcessTable(), kernel=kernel)
    stack = [0xFFFFFFFF81000010, 0xFFFFFFFF81000010]
    assert [f.name for f in sym.kernel_frames(stack)] == ["second", "first"]
    lookups = []
    real = KernelSymbols.lookup_many
    kernel.lookup_many = lambda addresses: lookups.append(addresses) or real(kernel, addresses)
    assert [f.name for f in sym.kernel_frames(list(reversed(stack)))] == ["second", "first"]
    assert lookups == []
    assert [f.name for f in sym.kernel_frames([0xFFFFFFFF81000011, 0xFFFFFFFF81000011])] == ["second", "second"]
    assert lookups == [[0xFFFFFFFF81000011, 0xFFFFFFFF81000010]]
    text.write_bytes(b"ffffffff81000000 T renamed\n")
    sym._kernel = KernelSymbols.load(str(text))
    assert [f.name for f in sym.kernel_frames([0xFFFFFFFF81000005])] == ["renamed"]
