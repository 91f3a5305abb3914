"""The pid watcher's reads of /proc, made faster: each must say what the plain way says."""

from __future__ import annotations

import os
import subprocess
import sys

from hotstack.procs import identity, info as procs_info, mapped, maps, table as procs_table
from hotstack.procs.maps import parse_exec_maps, parse_maps

# Lines of the shapes /proc/PID/maps has: no path, a pseudo path, a path with spaces, a deleted file,
# an executable mapping of anonymous memory (JIT), and a 5-level address.
SAMPLE_MAPS = """\
55d0c6a00000-55d0c6a28000 r--p 00000000 fe:01 1050 /usr/bin/xz
55d0c6a28000-55d0c6a8f000 r-xp 00028000 fe:01 1050 /usr/bin/xz
7f3b40000000-7f3b40021000 rw-p 00000000 00:00 0
7f3b44000000-7f3b44001000 rwxp 00000000 00:00 0
7f3b4a400000-7f3b4a426000 r-xp 00026000 fe:01 2050                       /opt/my lib/lib x.so (deleted)
7f3b4a5f0000-7f3b4a5f1000 --xp 00000000 00:00 0                          [anon:jit]
7ffd1c1d6000-7ffd1c1f7000 rw-p 00000000 00:00 0                          [stack]
7ffd1c1fb000-7ffd1c1fd000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
1ff7f3b4a5f0000-1ff7f3b4a5f1000 r-xp 00001000 fe:01 77 /lib/x
"""


def _slow(text: str):
    return [m for m in parse_maps(text) if m.executable]


def test_exec_maps_parse_as_the_full_parse_filtered():
    fast = parse_exec_maps(SAMPLE_MAPS)
    assert fast == _slow(SAMPLE_MAPS)
    assert [m.path for m in fast] == ["/usr/bin/xz", "", "/opt/my lib/lib x.so (deleted)", "[anon:jit]",
                                      "[vdso]", "[vsyscall]", "/lib/x"]
    assert fast[2].file_path == "/opt/my lib/lib x.so" and fast[2].offset == 0x26000 and fast[2].inode == 2050


def test_exec_maps_parse_as_the_full_parse_on_every_process_here():
    compared = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                text = f.read()
        except OSError:
            continue
        assert parse_exec_maps(text) == _slow(text), pid
        compared += bool(text)
    assert compared >= 5


def test_stat_gives_the_start_time_the_comm_that_comm_gives_and_the_parent(tmp_path):
    # a name with a space and a parenthesis: the comm ends at the last ')' of the stat line
    exe = tmp_path / "odd (name) x"
    exe.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(exe), "5"])
    try:
        start, comm, ppid = identity.read_stat(child.pid)
        with open(f"/proc/{child.pid}/comm") as f:
            assert comm == f.read().rstrip("\n") == "odd (name) x"
        with open(f"/proc/{child.pid}/stat") as f:
            assert start == int(f.read().rsplit(")", 1)[1].split()[19])
        info = procs_info.read_process(child.pid)
        assert info is not None and info.comm == comm and info.start_time == start
        assert ppid == info.ppid == os.getpid() == identity.parent_pid(child.pid)
    finally:
        child.kill()
        child.wait()
    assert identity.read_stat(child.pid) is None


def test_a_pid_gone_before_it_is_read_is_counted_gone_after_one_read(monkeypatch):
    reads = []
    real = identity.read_stat
    monkeypatch.setattr(procs_table, "read_stat", lambda pid: reads.append(pid) or real(pid))
    child = subprocess.Popen(["true"])
    child.wait()
    table = procs_table.ProcessTable()
    assert table.observe(child.pid) is None
    assert (table.maps_reads, table.maps_gone) == (1, 1)
    assert reads == [child.pid]


def _kernel_at_least(major: int, minor: int) -> bool:
    release = os.uname().release.split("-")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


def _text_exec_maps(pid: int):
    with open(f"/proc/{pid}/maps") as f:
        return [m for m in parse_exec_maps(f.read()) if m.path != "[vsyscall]"]


def test_the_query_gives_the_executable_mappings_the_text_gives(tmp_path):
    # the shapes that matter: a deleted file, a path with a space, anonymous executable memory
    # (JIT), shared memory, the vDSO; then every process of this host
    lib = tmp_path / "my lib.so"
    lib.write_bytes(b"\0" * 8192)
    code = ("import mmap, os, sys, time\n"
            f"f = open({str(lib)!r}, 'rb')\n"
            "m = mmap.mmap(f.fileno(), 8192, prot=mmap.PROT_READ | mmap.PROT_EXEC, flags=mmap.MAP_PRIVATE)\n"
            "j = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,\n"
            "              prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
            "s = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC)\n"
            f"os.unlink({str(lib)!r})\n"
            "print('ready', flush=True)\n"
            "time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        queried = maps.query_exec_maps(child.pid)
        if not _kernel_at_least(6, 11):
            assert queried is None     # (the text is read: every other test covers that)
            return
        assert queried == _text_exec_maps(child.pid)
        paths = [m.path for m in queried]
        assert f"{lib} (deleted)" in paths and "[vdso]" in paths
        assert any(m.path == "" and m.perms == "rwxp" for m in queried)
        assert any(m.path == "/dev/zero (deleted)" and m.perms == "r-xs" for m in queried)
        assert mapped.exec_paths(child.pid) == "\n".join(paths)
    finally:
        child.kill()
        child.wait()
    assert maps.query_exec_maps(child.pid) == [] and maps.read_maps(child.pid) == []
    compared = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        text = queried = None
        for _attempt in range(3):
            # (one read a moment after the other: a process may have exited, or mapped code between)
            try:
                text = _text_exec_maps(int(pid))
                queried = maps.query_exec_maps(int(pid))
            except OSError:
                break
            if queried == text or not queried or not text:
                break
        if queried and text:
            assert queried == text, pid
            compared += 1
    assert compared >= 5


def test_without_the_query_the_text_is_read(monkeypatch):
    monkeypatch.setattr(maps, "_query_works", False)
    assert maps.query_exec_maps(os.getpid()) is None
    with open("/proc/self/maps") as f:
        text = parse_exec_maps(f.read())
    assert maps.read_maps(os.getpid()) == text != []
    assert procs_info.read_process(os.getpid()).mappings.mappings == sorted(text, key=lambda m: m.start)


def test_a_process_without_an_address_space_has_no_mappings_either_way():
    # kthreadd (pid 2) is a kernel thread: its maps text is empty, and the query finds no address space
    assert _text_exec_maps(2) == []
    assert maps.query_exec_maps(2) == ([] if _kernel_at_least(6, 11) else None)
    assert maps.read_maps(2) == []
