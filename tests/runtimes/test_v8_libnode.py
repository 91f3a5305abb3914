"""A `node` that keeps V8 in a shared libnode.so (Debian's own Node.js builds): its layout is read
from the library the process maps, whatever else its maps hold (anonymous lines end in a space).

The library is built in the test with every v8dbg_* value of this machine's node, as one global
each: its string table holds the names back to back, as a real libnode's does."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hotstack import procs
from hotstack.runtimes.v8.metadata import layout, read_v8dbg
from hotstack.runtimes.v8.source import V8Source

from ..conftest import compile_c

pytestmark = pytest.mark.root

NODE = shutil.which("node")


def _need_node() -> str:
    if NODE is None:
        pytest.skip("no node on this machine (.ci/install.d/runtimes.sh installs it)")
    return NODE


def _libnode(build: Path, meta: dict[str, int]) -> Path:
    source = build / "libnode.c"
    source.write_text("".join(f"const long long {name} = {value}LL;\n" for name, value in sorted(meta.items())))
    return compile_c(source, build / "libnode.so.115", "-shared", "-fPIC", "-O0")


def _node_program(build: Path) -> Path:
    """An executable named `node` that links the library and waits (as Debian's node does)."""
    source = build / "main.c"
    source.write_text("#include <unistd.h>\nextern const long long v8dbg_off_fp_function;\n"
                      "int main(void) { volatile long long f = v8dbg_off_fp_function; (void)f;"
                      " for (;;) pause(); }\n")
    out = build / "node"
    subprocess.run(["cc", str(source), "-o", str(out), f"-L{build}", "-l:libnode.so.115", f"-Wl,-rpath,{build}"],
                   check=True)
    return out


def test_adjacent_names_are_all_read(tmp_path):
    meta = read_v8dbg(_need_node())
    assert len(meta) > 300
    lib = _libnode(tmp_path, meta)
    assert read_v8dbg(str(lib)) == meta


def test_a_node_that_maps_libnode_is_detected(tmp_path, workloads):
    node = _need_node()
    meta = read_v8dbg(node)
    _libnode(tmp_path, meta)
    program = _node_program(tmp_path)
    w = workloads([str(program)])
    deadline = time.monotonic() + 10
    while "libnode.so" not in procs.exec_paths(w.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    text = procs.read_maps_text(w.pid)
    assert any(line.endswith(" ") for line in text.splitlines())    # the shape that broke a split
    source = V8Source()
    assert source.detect(procs.LiveProcess(w.pid))
    # the library carries the metadata only (not V8's bytecode lengths, which node's symbols hold)
    assert source._layout(procs.LiveProcess(w.pid)) == layout(meta)


def test_libnode_replaced_on_disk_is_still_read(tmp_path, workloads):
    """A package upgrade replaces the library under a running node: the mapped one is read."""
    meta = read_v8dbg(_need_node())
    lib = _libnode(tmp_path, meta)
    program = _node_program(tmp_path)
    w = workloads([str(program)])
    deadline = time.monotonic() + 10
    while "libnode.so" not in procs.exec_paths(w.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.unlink(lib)
    lib.write_bytes(b"not an ELF file")
    assert V8Source().detect(procs.LiveProcess(w.pid))
