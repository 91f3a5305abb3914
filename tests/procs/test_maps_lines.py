"""procs/maps.py, the one reader of /proc/PID/maps: every shape of line the kernel writes (an
anonymous mapping's line ends in a space; ' (deleted)'; spaces in paths; a newline, which the
kernel writes as \\012; memfd and special mappings), parsed from text as the kernel formats it
(property-based) and read from a real process that maps each shape, where the text and the
PROCMAP_QUERY ioctl must agree."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hotstack import procs
from hotstack.procs.maps import Mapping, parse_exec_maps, parse_maps, query_exec_maps

_PATH_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")


def _kernel_line(m: Mapping) -> str:
    """A line as show_map_vma writes it: fields, then, when there is a name, padding to column 73
    and the name (a newline in it as \\012); an anonymous mapping's line ends in the space after
    its inode."""
    major, minor = m.dev.split(":")
    head = f"{m.start:08x}-{m.end:08x} {m.perms} {m.offset:08x} {major}:{minor} {m.inode} "
    if not m.path:
        return head
    return head.ljust(73) + m.path.replace("\n", "\\012")


_paths = st.one_of(
    st.just(""), st.sampled_from(["[heap]", "[stack]", "[vdso]", "[vvar]", "[anon:name]"]),
    st.builds(lambda p, deleted: "/" + p + (" (deleted)" if deleted else ""),
              # (a backslash and 012 in a name reads as the kernel's escape of a newline: the text
              # cannot tell them apart, and a newline is the one a hostile name uses)
              st.text(_PATH_CHARS, min_size=1, max_size=40).filter(lambda p: "\\012" not in p), st.booleans()),
    st.builds(lambda n: f"/memfd:{n} (deleted)", st.text("abc -_.", min_size=0, max_size=12)),
)
_mappings = st.builds(
    lambda start, size, perms, offset, major, minor, inode, path: Mapping(
        start, start + size, offset, perms, f"{major:02x}:{minor:02x}", inode if path.startswith("/") else 0, path),
    st.integers(0, 1 << 46).map(lambda a: a << 12), st.integers(1, 1 << 20).map(lambda n: n << 12),
    st.sampled_from(["r--p", "rw-p", "r-xp", "rwxp", "r-xs", "---p"]), st.integers(0, 1 << 40),
    st.integers(0, 255), st.integers(0, 255), st.integers(1, 1 << 40), _paths)


@settings(max_examples=300, deadline=None)
@given(st.lists(_mappings, min_size=1, max_size=8))
def test_every_line_shape_parses_back(mappings):
    text = "\n".join(_kernel_line(m) for m in mappings) + "\n"
    assert parse_maps(text) == mappings
    assert parse_exec_maps(text) == [m for m in mappings if m.executable]


@pytest.mark.root
def test_a_process_that_maps_every_shape(tmp_path):
    """A process maps files named with spaces and a newline, a file deleted since, a memfd, and
    anonymous memory, each executable: the text's parse and PROCMAP_QUERY agree on all of them."""
    names = ["plain.bin", "with space.bin", "new\nline.bin", "gone.bin"]
    for name in names:
        (tmp_path / name).write_bytes(b"\x90" * 8192)
    code = f"""
import mmap, os, sys, time
d = {str(tmp_path)!r}
keep = []
for name in {names!r}:
    fd = os.open(os.path.join(d, name), os.O_RDONLY)
    keep.append(mmap.mmap(fd, 8192, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_EXEC))
os.unlink(os.path.join(d, "gone.bin"))
mfd = os.memfd_create("hs mem")
os.write(mfd, b"\\x90" * 8192)
keep.append(mmap.mmap(mfd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_EXEC))
keep.append(mmap.mmap(-1, 8192, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, mmap.PROT_READ | mmap.PROT_EXEC))
print("ready", flush=True)
time.sleep(60)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        text = procs.read_maps_text(proc.pid)
        assert any(line.endswith(" ") for line in text.splitlines())
        parsed = [m for m in parse_maps(text) if m.executable]
        assert parsed == parse_exec_maps(text)
        paths = {m.path for m in parsed}
        for name in names[:3]:
            assert str(tmp_path / name) in paths, (name, paths)
        assert f"{tmp_path / 'gone.bin'} (deleted)" in paths
        assert "/memfd:hs mem (deleted)" in paths
        queried = query_exec_maps(proc.pid)
        if queried is not None:                    # (kernels from 6.11; the vsyscall page is no VMA)
            assert queried == [m for m in parsed if m.path != "[vsyscall]"]
        # what the runtimes' detection opens: the very file, deleted or oddly named
        for m in parsed:
            if m.path.startswith(str(tmp_path)):
                assert procs.mapped_file_path(proc.pid, m) is not None, m
    finally:
        proc.kill()
        proc.wait()


def test_files_past_the_bound_are_counted_and_said():
    """procs/held_files.py holds the files of a process in its own root open up to a bound; those
    past it are counted (hotstack_files_not_held_total, the footer), never dropped unsaid."""
    from hotstack.gadget.output import footer
    from hotstack.procs.held_files import HeldFiles
    from hotstack.profile.model import Profile, ProfileStats
    files = [m for m in parse_maps(procs.read_maps_text(os.getpid())) if m.is_file and m.executable]
    files = list({(m.dev, m.inode): m for m in files}.values())
    assert len(files) >= 3
    held = HeldFiles(max_files=1)
    keys = held.hold(os.getpid(), files, root_is_host=False)
    try:
        assert len(keys) == 1 and len(held) == 1 and held.refused == len(files) - 1
    finally:
        held.release(keys)
    stats = ProfileStats(files_not_held=held.refused)
    text = footer(Profile([], 0, 10**9, 99, stats=stats), 0, 0)
    assert f"{held.refused} files of containers' processes not held open" in text
