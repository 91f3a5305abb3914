"""Announcements of processes of a plain image (sampling/plain_images.py) do not wake the pid
watcher; every other announcement does, even behind a quiet one that is still unread
(bpf/pids.h announce)."""

from __future__ import annotations

import os
import select
import signal
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hotstack import procs
from hotstack.sampling import Engine, EngineConfig, plain_images
from hotstack.sampling.plain_images import PlainImages, image_key

from ..conftest import compile_c

BUSY_C = "int main(void) { for (;;) ; }\n"


class _NoWatcher(Engine):
    """An engine whose pid watcher does not run: the test reads the announcements itself."""

    def _watch_new_pids(self) -> None:
        return


def _kill_with_children(proc: subprocess.Popen) -> None:
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        children = []
    proc.kill()
    proc.wait()
    for child in children:
        try:
            os.kill(int(child), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _started(running: list, argv: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(argv)
    running.append(proc)
    return proc


def _tables_built(sampler) -> None:
    """Wait (1-10 s) until the kernel unwinder has no file queued for a table: a queued file wakes the
    watcher too (a record of pid 0), which a test of the announcements' wake-ups must not see."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (sampler.native_queued() or time.monotonic() < deadline - 9):
        time.sleep(0.1)


def _busy(tmp_path: Path) -> Path:
    """A program that spins, named quiet_one."""
    source = tmp_path / "busy.c"
    source.write_text(BUSY_C)
    return compile_c(source, tmp_path / "quiet_one", "-O0")


def _plain_after_first(sampler, epoll: select.epoll, running: list, argv: list[str]):
    """A first process of argv (quiet_one) announced, its files' unwind tables built, then killed and
    its image marked plain; what its announcement told."""
    first = _started(running, argv)
    told = _announced(sampler, first.pid, epoll)[first.pid]
    assert told is not None and told.comm == "quiet_one" and told.exe_ino, told
    _tables_built(sampler)
    first.kill()
    _mark_plain(sampler, told, epoll)
    return told


def _mark_plain(sampler, told, epoll: select.epoll) -> None:
    """told's image marked plain in the kernel, the ring read to its end (it wakes no more)."""
    sampler.mark_plain(image_key(told), True)
    sampler.new_pids()
    sampler.native_work_announced()         # (forgets the work records read)
    assert not epoll.poll(0), "the ring, read, still wakes"


def _assert_quiet(sampler, epoll: select.epoll, start, what: str) -> subprocess.Popen:
    """A process from start() is announced (the ring holds a record unread) without waking `epoll`.
    A wake-up may come with work for the unwind thread (pid 0's record: a file the first process's
    samples did not meet, e.g. the dynamic loader's code, queued for a table), or, on a loaded
    machine, with nothing read (a record whose wake-up came but that was not committed yet when the
    ring was read): then another process, at most five. A quiet announcement that wakes the watcher
    wakes it every time."""
    woke = []
    for _attempt in range(5):
        proc = start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not sampler._wakeups.pending():
            time.sleep(0.05)
        assert sampler._wakeups.pending(), f"{what} was never announced"
        if not epoll.poll(0.5):
            return proc
        announced = {pid for pid, _exec_ed, _told in sampler.new_pids()}
        woke.append(f"{announced}, with work queued: {sampler.native_work_announced()}, "
                    f"{sampler._wakeups.backlog} of {sampler._wakeups.size} bytes of the ring unread")
        _kill_with_children(proc)
    pytest.fail(f"{what}: each of five woke the watcher: " + "; ".join(woke))


def _assert_wakes(sampler, epoll: select.epoll, running: list, argv: list[str], what: str) -> dict:
    """A process of argv wakes `epoll` and is announced; what the ring announced (see _announced)."""
    proc = _started(running, argv)
    assert epoll.poll(10), f"{what} did not wake the watcher"
    return _announced(sampler, proc.pid, epoll)


def _announced(sampler, pid: int, epoll: select.epoll) -> dict:
    """pid -> what its announcement told, once `pid` is announced (the ring woke `epoll`)."""
    deadline = time.monotonic() + 10
    told: dict = {}
    while time.monotonic() < deadline and pid not in told:
        epoll.poll(0.5)
        told.update({p: t for p, _exec_ed, t in sampler.new_pids()})
    assert pid in told, f"pid {pid} was never announced"
    return told


@pytest.mark.root
def test_a_plain_image_is_announced_quietly_and_others_wake_the_watcher_behind_it(tmp_path):
    quiet = _busy(tmp_path)
    loud = Path(shutil.copy(quiet, tmp_path / "loud_one"))       # (another inode: another image)
    running: list[subprocess.Popen] = []
    epoll = select.epoll()
    try:
        with _NoWatcher(EngineConfig(frequency=499, comms=("quiet_one", "loud_one"), runtime_frames=False)) as engine:
            if not engine._can_note_from_announcements():
                pytest.skip("processes are noted only where the kernel unwinder walks the VMAs itself (6.1+)")
            sampler = engine.cpu
            epoll.register(sampler.wakeup_fd(), select.EPOLLIN)
            told = _plain_after_first(sampler, epoll, running, [str(quiet)])

            second = _assert_quiet(sampler, epoll, lambda: _started(running, [str(quiet)]),
                                   "the second process of a plain image")

            announced = _assert_wakes(sampler, epoll, running, [str(loud)], "an announcement behind an unread quiet one")
            assert second.pid in announced and announced[second.pid].comm == "quiet_one", announced

            # an image no longer plain wakes again
            sampler.mark_plain(image_key(told), False)
            _assert_wakes(sampler, epoll, running, [str(quiet)], "an image taken out of plain_images")
    finally:
        epoll.close()
        for proc in running:
            _kill_with_children(proc)


@pytest.mark.root
def test_a_child_started_into_another_mount_namespace_wakes_the_watcher(tmp_path):
    """A process of a plain image whose parent is in another mount namespace (`docker exec`'s, started
    into a container from outside it) is read at once, not noted (its container is its own): its
    announcement wakes the pid watcher; a child of a process in its own namespace does not."""
    exe = _busy(tmp_path)
    holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "120"])
    running: list[subprocess.Popen] = [holder]
    epoll = select.epoll()
    try:
        with _NoWatcher(EngineConfig(frequency=499, comms=("quiet_one",), runtime_frames=False)) as engine:
            if not engine._can_note_from_announcements():
                pytest.skip("processes are noted only where the kernel unwinder walks the VMAs itself (6.1+)")
            sampler = engine.cpu
            epoll.register(sampler.wakeup_fd(), select.EPOLLIN)
            time.sleep(0.2)     # (the holder in its namespace)
            enter = ["nsenter", "-t", str(holder.pid), "-m"]
            _plain_after_first(sampler, epoll, running, [*enter, str(exe)])   # (nsenter execs it: its parent is this one)

            _assert_quiet(sampler, epoll, lambda: _started(running, [*enter, "sh", "-c", f"{exe} & wait"]),
                          "a child of a shell in its own mount namespace")
            sampler.new_pids()

            _assert_wakes(sampler, epoll, running, [*enter, str(exe)],
                          "a process whose parent is in another mount namespace")
    finally:
        epoll.close()
        for proc in running:
            _kill_with_children(proc)


class _Recorder:
    """A sampler's mark_plain, recorded: the kernel's copy of the set."""

    def __init__(self) -> None:
        self.marked: set = set()

    def mark_plain(self, image, plain: bool) -> None:
        (self.marked.add if plain else self.marked.discard)(image)


def _read(exe: str, *files: str):
    mappings = [SimpleNamespace(path=f, is_file=True) for f in (exe, *files)]
    return SimpleNamespace(exe=exe, mappings=SimpleNamespace(mappings=mappings))


def test_the_kernel_copy_of_plain_images_follows_the_set(monkeypatch):
    monkeypatch.setattr(plain_images, "MAX_PLAIN_IMAGES", 3)
    images = PlainImages()
    xz = procs.Announced(start_time=1, comm="xz", ppid=1, mntns=7, exe_ino=11)
    early = procs.Announced(start_time=1, comm="cc1", ppid=1, mntns=7, exe_ino=12)
    images.learn(xz, _read("/usr/bin/xz", "/usr/lib/x86_64-linux-gnu/libc.so.6"))
    images.learn(early, _read("/usr/bin/cc1", "/usr/lib64/ld-linux-x86-64.so.2"))   # (libc not loaded yet)
    kernel = _Recorder()
    images.quiet_in([kernel])
    assert xz in images and early not in images and kernel.marked == {image_key(xz)}
    images.runs_runtime(xz)                  # (a dlopen'ed runtime)
    assert xz not in images and not kernel.marked
    images.learn(xz, _read("/usr/bin/xz", "/usr/lib/x86_64-linux-gnu/libc.so.6"))
    images.lost_mappings(xz)                 # read from then on: not learned again
    images.learn(xz, _read("/usr/bin/xz", "/usr/lib/x86_64-linux-gnu/libc.so.6"))
    assert xz not in images and not kernel.marked
    static = [procs.Announced(start_time=1, comm=f"s{i}", ppid=1, mntns=7, exe_ino=20 + i) for i in range(4)]
    for told in static:
        images.learn(told, _read(f"/opt/s{told.exe_ino}"))
    # (full at 3: cleared, in the kernel too, before the fourth)
    assert [t in images for t in static] == [False, False, False, True] and kernel.marked == {image_key(static[3])}
