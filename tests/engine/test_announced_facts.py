"""What a program's announcement of a new process tells (bpf/pids.h announcement_facts): its start
time, parent, main thread's name and mount namespace, as /proc would say them, so that the pid
watcher reads neither /proc/PID/stat nor /proc/PID/ns/mnt for it once the first announcement was
found to agree with /proc; and where one disagrees, /proc is read as before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from hotstack import procs
from hotstack.procs import identity, table
from hotstack.sampling import Engine, EngineConfig

pytestmark = pytest.mark.root

_SPIN = "while True: pass"


def _spinner(tmp_path, name: str, *wrapper: str) -> subprocess.Popen:
    """A Python process that spins on the CPU until killed, named `name` from its exec (the
    interpreter run through a link of that name: no sample can see another name first)."""
    link = tmp_path / name
    if not link.exists():
        link.symlink_to(os.path.realpath(sys.executable))
    return subprocess.Popen([*wrapper, str(link), "-c", _SPIN])


def _announced(engine: Engine, pids: dict[int, list]) -> None:
    """Record what each announcement of the wanted pids told (the engine still gets them); before
    the engine starts, so that its first round's are seen too."""
    sampler = engine.cpu
    real = sampler.new_pids

    def new_pids():
        taken = real()
        for pid, _exec, told in taken:
            if pid in pids:
                pids[pid].append(told)
        return taken
    sampler.new_pids = new_pids


def _host_pid(child: subprocess.Popen, name: str) -> int:
    """The pid of the process named `name` under `child` (itself, or a descendant: a wrapper's)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for pid in [child.pid, *_descendants(child.pid)]:
            stat = identity.read_stat(pid)
            if stat is not None and stat[1] == name:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"no process named {name} under {child.pid}")


def _descendants(pid: int) -> list[int]:
    found = []
    for other in procs.all_pids():
        parent = procs.parent_pid(other)
        if parent == pid:
            found += [other, *_descendants(other)]
    return found


def test_an_announcement_tells_what_proc_says(tmp_path):
    """A process in the host's mount namespace and one in a mount namespace of its own (unshare -m):
    each announcement tells the start time, parent, name, mount namespace and executable /proc
    shows."""
    children = [_spinner(tmp_path, "told-here")]
    if shutil.which("unshare"):
        children.append(_spinner(tmp_path, "told-apart", "unshare", "-m", "--propagation", "private"))
    try:
        pids = {_host_pid(child, name): [] for child, name in zip(children, ("told-here", "told-apart"))}
        engine = Engine(EngineConfig(frequency=199, runtime_frames=False))
        _announced(engine, pids)
        with engine:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not all(pids.values()):
                time.sleep(0.2)
            for pid, told in pids.items():
                assert told, f"pid {pid} was not announced"
                stat = identity.read_stat(pid)
                exe_ino = os.stat(f"/proc/{pid}/exe").st_ino
                assert told[0] == procs.Announced(stat[0], stat[1], stat[2], procs.mount_namespace(pid),
                                                  exe_ino), (pid, stat)
                known = engine.processes.get(pid)
                assert (known.start_time, known.comm, known.ppid, known.mntns, known.image[1]) == tuple(told[0])
            assert engine.processes._told_agrees is True
        if len(pids) == 2:
            here, apart = (told[0].mntns for told in pids.values())
            assert here != apart and here == os.stat("/proc/self/ns/mnt").st_ino
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_reads_spared_once_an_announcement_agreed(monkeypatch, tmp_path):
    """After the first announcement agreed with /proc, a new process's stat and mount namespace
    are not read: the process table takes the announcement's."""
    reads: list[int] = []
    real_read_stat = identity.read_stat

    def counted(pid):
        reads.append(pid)
        return real_read_stat(pid)
    with Engine(EngineConfig(frequency=199, runtime_frames=False)) as engine:
        first = _spinner(tmp_path, "told-first")
        try:
            deadline = time.monotonic() + 10
            while engine.processes._told_agrees is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert engine.processes._told_agrees is True
            for module in (table, identity):     # (the table's reads, and a LiveProcess's)
                monkeypatch.setattr(module, "read_stat", counted)
            later = _spinner(tmp_path, "told-later")
            try:
                deadline = time.monotonic() + 10
                while not engine.processes.known(later.pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                known = engine.processes.get(later.pid)
                assert known is not None and known.comm == "told-later" and known.ppid == os.getpid()
                assert known.mappings.mappings and known.exe
                assert later.pid not in reads
            finally:
                later.kill()
                later.wait()
        finally:
            first.kill()
            first.wait()


def test_an_announcement_that_disagrees_leaves_proc_read(tmp_path):
    """Where the first announcement's start time is not /proc's (another clock, a time namespace),
    no announcement stands for /proc: the process table reads it as before."""
    table = procs.ProcessTable()
    child = _spinner(tmp_path, "told-wrong")
    try:
        time.sleep(0.2)
        stat = identity.read_stat(child.pid)
        wrong = procs.Announced(stat[0] + 100, "wrong-name", 1, procs.mount_namespace(child.pid))
        info = table.observe(child.pid, wrong)
        assert table._told_agrees is False
        assert (info.start_time, info.comm, info.ppid) == stat
        other = procs.ProcessTable()
        other._told_agrees = False
        assert other.observe(child.pid, wrong).start_time == stat[0]
    finally:
        child.kill()
        child.wait()


def test_a_process_gone_before_its_read_is_not_taken_for_a_live_one():
    """An announced process that exited before the pid watcher read it: the announcement's start
    time does not make it a process with no mappings (its samples are then named from what the
    kernel unwinder cached for it, engine._adopt_exited)."""
    table = procs.ProcessTable()
    table._told_agrees = True
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    info = table.observe(child.pid, procs.Announced(12345, "gone", os.getpid(), 0))
    assert info is None and not table.known(child.pid) and table.maps_gone == 1


def test_an_exec_since_the_announcement_takes_the_name_from_proc(tmp_path):
    """A process announced before its exec (a shell's child, sampled in the shell's code) and read
    after it: the name read with the new image's maps is the new image's, not the announced one
    (naming tells a sample taken before the exec by its other name, samples.py _forked_from)."""
    table = procs.ProcessTable()
    table._told_agrees = True
    child = _spinner(tmp_path, "told-execd")
    try:
        stat = _wait_named(child.pid, "told-execd")
        before = procs.Announced(stat[0], "sh", stat[2], procs.mount_namespace(child.pid),
                                 os.stat("/bin/sh").st_ino)
        info = table.observe(child.pid, before)
        assert (info.start_time, info.comm, info.ppid) == stat
        now = procs.Announced(stat[0], "told-execd", stat[2], 0, os.stat(f"/proc/{child.pid}/exe").st_ino)
        fresh = procs.ProcessTable()
        fresh._told_agrees = True
        assert fresh.observe(child.pid, now).comm == "told-execd"
    finally:
        child.kill()
        child.wait()


def _wait_named(pid: int, name: str):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stat = identity.read_stat(pid)
        if stat is not None and stat[1] == name:
            return stat
        time.sleep(0.02)
    raise AssertionError(f"{pid} never named {name}")
