"""What the pid watcher does with a new process: read once, not once per frame source and retry,
and looked at again when it loads a library that embeds a runtime long after it started."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

pytestmark = pytest.mark.root

# Opens of /proc/PID/maps by the engine's pid watcher (thread "hotstack-pids": the process table and
# the frame sources), for the pids in _WATCHED (an audit hook sees every open(), whichever layer
# calls it; it cannot be removed, so it only counts while a pid is watched). The unwind thread's
# reads are not counted: it reads the maps of a process that brought a file without a table, and
# which files a new process brings depends on where its first samples fall (between fork and exec
# the child still runs its parent's code: CI once saw the shell queue Python's _posixsubprocess).
_WATCHED: dict[str, int] = {}
_HOOKED = threading.Lock()
_hook_installed = False


def _count_maps_opens(event: str, args: tuple) -> None:
    if (event == "open" and _WATCHED and isinstance(args[0], str) and args[0] in _WATCHED
            and threading.current_thread().name == "hotstack-pids"):
        _WATCHED[args[0]] += 1


def _watch(pid: int) -> str:
    global _hook_installed
    with _HOOKED:
        if not _hook_installed:
            sys.addaudithook(_count_maps_opens)
            _hook_installed = True
    path = f"/proc/{pid}/maps"
    _WATCHED[path] = 0
    return path


def _busy_shell(prof: Engine) -> tuple[subprocess.Popen, int]:
    """A busy shell, once the engine knows it; (it, the pid watcher's reads of its maps 4 s later)."""
    busy = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    path = _watch(busy.pid)
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not prof.processes.known(busy.pid):
            time.sleep(0.1)
        assert prof.processes.known(busy.pid), "the busy shell was never announced"
        time.sleep(4)               # past every retry age but the last (6.4 s, JVMs only)
        return busy, _WATCHED[path]
    except BaseException:
        busy.kill()                 # (a shell left spinning makes its image one the engine has met)
        busy.wait()
        raise
    finally:
        _WATCHED.pop(path, None)


def test_a_process_that_runs_no_runtime_has_its_maps_read_once_and_the_next_of_its_image_none():
    """Six frame sources look at every new process of the host; with no runtime named in its maps
    or executable, they share the process table's read and none of them looks again later (the
    retries at 0.1-6.4 s are for interpreters still starting). Before: 17 reads for a busy shell.
    The next process of that image (a loop's commands) is noted from its announcement with no read
    at all where the kernel unwinder keeps the mappings it walks (Engine._noted_from_announcement); its stacks are
    still named, with its mappings read when naming needs them."""
    with Engine(EngineConfig(frequency=499)) as prof:
        assert len(prof.runtimes) >= 2, [s.name for s in prof.runtimes]
        first, first_reads = _busy_shell(prof)
        first.kill()
        first.wait()
        busy, reads = _busy_shell(prof)
        try:
            noted = prof.processes.peek(busy.pid).lazy
            lazy_possible = all(s.native is not None and s.native_vma_walk for s in prof._started)
            # (the kernel's copy: the next processes of the image are announced without a wake-up)
            marked = len(list(prof.cpu.collection.maps["plain_images"].keys()))
            prof.collect()
            time.sleep(1)
            samples = [s for s in prof.collect()[0].samples if s.pid == busy.pid]
        finally:
            busy.kill()
            busy.wait()
    assert first_reads == 1, f"/proc/PID/maps of a busy shell read {first_reads} times"
    assert (reads, noted) == ((0, True) if lazy_possible else (1, False)), (reads, noted, lazy_possible)
    assert (marked >= 1) == lazy_possible, (marked, lazy_possible)
    shell = Path("/bin/sh").resolve()
    assert samples and all(any(Path(f.module).name == shell.name for f in s.stack) for s in samples), \
        [[(f.name, f.module) for f in s.stack] for s in samples[:3]]


EMBED_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
static volatile unsigned long sink;
int main(int argc, char **argv) {
    /* native work first, long after every retry age of the frame sources: no runtime mapped */
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    do { for (int i = 0; i < 100000; i++) sink += i; clock_gettime(CLOCK_MONOTONIC, &b); }
    while (b.tv_sec - a.tv_sec < atoi(argv[2]));
    void *py = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!py) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    void (*init)(void) = (void (*)(void))dlsym(py, "Py_Initialize");
    int (*run)(const char *) = (int (*)(const char *))dlsym(py, "PyRun_SimpleString");
    init();
    return run("def embedded_hot():\n    return sum(range(2000))\nwhile True:\n    embedded_hot()\n");
}
"""


def _libpython() -> Path:
    lib = Path(sysconfig.get_config_var("LIBDIR") or "") / (sysconfig.get_config_var("INSTSONAME") or "")
    if not lib.is_file():
        pytest.skip(f"no shared libpython for {sys.executable}")
    return lib


def test_a_runtime_loaded_late_by_dlopen_gets_its_frames(tmp_path):
    """A C program that dlopens libpython 6 s after it started (after the sources' retries would
    have ended): its maps, read again for an address in no known mapping, hold a new file, so the
    frame sources look at it again and its Python frames follow."""
    lib = Path("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0")
    lib = lib if lib.is_file() else _libpython()
    source = tmp_path / "embed.c"
    source.write_text(EMBED_C.replace("#include <time.h>", "#include <time.h>\n#include <stdlib.h>"))
    subprocess.run(["cc", "-O1", str(source), "-o", str(tmp_path / "embed"), "-ldl"], check=True)
    proc = subprocess.Popen([str(tmp_path / "embed"), str(lib), "6"])
    samples: list = []
    try:
        with Engine(EngineConfig(frequency=499, pids=(proc.pid,))) as prof:
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline:
                time.sleep(0.5)
                samples.extend(prof.collect()[0].samples)
                if sum(1 for s in samples if any(f.name == "embedded_hot" and f.kind is FrameKind.PYTHON
                                                 for f in s.stack)) >= 20:
                    break
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode is not None
    python = [s for s in samples if any(f.kind is FrameKind.PYTHON for f in s.stack)]
    names = {f.name for s in python for f in s.stack if f.kind is FrameKind.PYTHON}
    assert len(python) >= 20 and "embedded_hot" in names, (len(samples), len(python), names)


def test_declined_pids_are_pruned_while_the_pid_watcher_declines_more():
    """The pid watcher declines pids (a target filter says no) while a collect, on another thread,
    prunes the exited ones: the collect must not fail (it once lost an agent's interval with "Set
    changed size during iteration")."""
    engine = Engine(EngineConfig(frequency=19, runtime_frames=False))
    engine.set_target_filter(lambda pid: False)
    stop = threading.Event()

    def decline():
        for pid in range(1 << 30, (1 << 30) + 30_000):   # no such processes: all are pruned
            if stop.is_set():
                return
            engine.wants(pid)
    watcher = threading.Thread(target=decline)
    watcher.start()
    try:
        while watcher.is_alive():
            engine._forget_dead()
    finally:
        stop.set()
        watcher.join()
    engine._forget_dead()
    assert not engine._declined


EXEC_IDLE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    /* sleeps, then execs itself: ~1 ms on a CPU per image, rarely sampled at 19 Hz */
    int left = argc > 1 ? atoi(argv[1]) : 0;
    usleep(150000);
    if (left <= 0) return 0;
    char next[16];
    snprintf(next, sizeof next, "%d", left - 1);
    execl("/proc/self/exe", argv[0], next, (char *)0);
    return 1;
}
"""


def test_execs_of_a_process_that_is_not_sampled_are_not_read(tmp_path):
    """An exec is marked in the kernel and announced by the process's next sample: a process that
    execs while it is not sampled (a build's compilers, a shell loop's commands that do nothing) is
    not read once per exec. Before: each of the 12 execs of this sleeping program was announced at
    once, and its maps read each time."""
    source = tmp_path / "exec_idle.c"
    source.write_text(EXEC_IDLE_C)
    exe = tmp_path / "exec_idle"
    subprocess.run(["cc", "-O1", str(source), "-o", str(exe)], check=True)
    execs = 12
    child = None
    try:
        with Engine(EngineConfig(frequency=19, comms=("exec_idle",))) as prof:
            assert prof.cpu is not None and prof.cpu._exec is not None, "no exec tracepoint on this kernel"
            child = subprocess.Popen([str(exe), str(execs)])
            path = _watch(child.pid)
            assert child.wait(timeout=20) == 0
            time.sleep(0.5)
            reads = _WATCHED[path]
    finally:
        if child is not None:
            _WATCHED.pop(f"/proc/{child.pid}/maps", None)
            if child.poll() is None:
                child.kill()
                child.wait()
    # a sample falls in ~1 ms of an image's CPU now and then (2% a time at 19 Hz): a few reads at most
    assert reads <= 3, f"/proc/PID/maps of a sleeping program read {reads} times over its {execs} execs"


# Opens of /proc/PID/stat by the thread that counts them (an audit hook cannot be removed: it counts
# only while _STAT_OPENS["on"] is set, and only on the thread that set it).
_STAT_OPENS = {"on": None, "count": 0}
_stat_hook_installed = False


def _count_stat_opens(event: str, args: tuple) -> None:
    if (event == "open" and _STAT_OPENS["on"] is threading.current_thread() and isinstance(args[0], str)
            and args[0].startswith("/proc/") and args[0].endswith("/stat")):
        _STAT_OPENS["count"] += 1


def _stat_opens_during(fn) -> int:
    global _stat_hook_installed
    if not _stat_hook_installed:
        sys.addaudithook(_count_stat_opens)
        _stat_hook_installed = True
    _STAT_OPENS["count"] = 0
    _STAT_OPENS["on"] = threading.current_thread()
    try:
        fn()
    finally:
        _STAT_OPENS["on"] = None
    return _STAT_OPENS["count"]


def test_an_exited_process_is_forgotten_from_its_exit_event_without_reading_proc():
    """The programs report the exits of the processes they announced (bpf/exec.bpf.c): the engine
    forgets a process that exited without reading /proc/PID/stat for every process it knows at
    every interval (which it did before: one read each, a tenth of its CPU under a loop of short
    commands), and keeps those still running."""
    with Engine(EngineConfig(frequency=199, runtime_frames=False)) as prof:
        assert prof.cpu is not None and prof.cpu._exits_known, "no exit tracepoint on this kernel"
        stays = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        goes = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        try:
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and not (prof.processes.known(stays.pid)
                                                       and prof.processes.known(goes.pid)):
                time.sleep(0.1)
            assert prof.processes.known(stays.pid) and prof.processes.known(goes.pid), "never announced"
            prof.collect()
            goes.kill()
            goes.wait()
            known = len(prof.processes)
            reads = _stat_opens_during(prof._forget_dead)
            assert not prof.processes.known(goes.pid), "the exited process is still known"
            assert prof.processes.known(stays.pid), "a running process was forgotten"
            assert reads == 0, f"{reads} reads of /proc/PID/stat to forget 1 of {known} processes"
            # where /proc must be read all the same (no exit reports: here, past FULL_CHECK_S) it is
            prof._full_check_at -= 3600
            reads = _stat_opens_during(prof._forget_dead)
            assert reads >= 1 and prof.processes.known(stays.pid), reads
        finally:
            for p in (stays, goes):
                if p.poll() is None:
                    p.kill()
                    p.wait()


_NAMED_THREADS = """
import ctypes, threading, time
libc = ctypes.CDLL(None)
def spin(name):
    libc.prctl(15, name.encode())          # PR_SET_NAME: this thread's comm
    end = time.monotonic() + 30
    while time.monotonic() < end:
        pass
for i in range(4):
    threading.Thread(target=spin, args=(f"worker-{i}",), daemon=True).start()
time.sleep(30)
"""


def test_threads_with_names_of_their_own_announce_their_process_once():
    """A process's name is its main thread's: threads that name themselves (a JVM's, a server's
    workers) do not announce their process again at each sample whose name differs from the last
    one's, which had cost two map updates and a wake-up a sample, and the pid watcher a look at
    the process at every round (every 0.1 s) while it ran."""
    announced: dict[int, int] = {}
    with Engine(EngineConfig(frequency=499, runtime_frames=False)) as prof:
        for sampler in prof._started:
            def counted(new_pids=sampler.new_pids):
                pids = new_pids()
                for pid, _exec, _told in pids:
                    announced[pid] = announced.get(pid, 0) + 1
                return pids
            sampler.new_pids = counted
        proc = subprocess.Popen([sys.executable, "-c", _NAMED_THREADS])
        try:
            time.sleep(2.5)
            samples = prof.collect()[0].samples
        finally:
            proc.kill()
            proc.wait()
    names = {s.comm for s in samples if s.pid == proc.pid}
    assert len({n for n in names if n.startswith("worker-")}) >= 3, names
    assert 1 <= announced.get(proc.pid, 0) <= 3, announced.get(proc.pid)


def test_pids_the_ring_had_no_room_for_are_announced_all_the_same(monkeypatch, tmp_path):
    """A process is announced by a record in the wakeups ring (bpf/pids.h); where the ring is full
    the program puts the pid in the new_pids map instead, which the pid watcher drains when it finds
    the ring full. Here the ring is one page (85 records) and is not read while 400 short processes
    run: every process sampled is announced all the same, the pids past the ring's room through
    the map."""
    from hotstack.sampling import cpu as cpu_module
    from hotstack.sampling import sampler as sampler_module

    exe = tmp_path / "short_children"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(Path(__file__).parent / "workloads/short_children.c")],
                   check=True)
    real_spec = cpu_module.CpuSampler.spec

    def one_page_ring(self):
        spec = real_spec(self)
        spec.maps["wakeups"].max_entries = 4096
        return spec
    monkeypatch.setattr(cpu_module.CpuSampler, "spec", one_page_ring)
    monkeypatch.setattr(sampler_module, "NEW_PIDS_DRAIN_S", 3600.0)   # no drain but the full ring's
    announced: set[int] = set()
    drained: list[int] = []
    with Engine(EngineConfig(frequency=999, comms=("short_children",), runtime_frames=False)) as prof:
        sampler = prof.cpu
        real_new_pids, real_clear = sampler.new_pids, sampler.clear_wakeups
        new_pids_map = sampler.collection.maps["new_pids"]
        real_drain = new_pids_map.drain

        def new_pids():
            pids = real_new_pids()
            announced.update(pid for pid, _exec, _told in pids)
            return pids

        def drain(*args):
            items = real_drain(*args)
            drained.append(len(items))
            return items
        sampler.new_pids, new_pids_map.drain = new_pids, drain
        time.sleep(0.5)                             # the first round's drain, before the load
        drained.clear()
        sampler.clear_wakeups = lambda: None        # the ring is not read: it fills
        subprocess.run([str(exe), "400"], check=True)
        sampler.clear_wakeups = real_clear
        time.sleep(1.0)                             # a round reads the full ring, drains the map
        samples = prof.collect()[0].samples
    sampled = {s.pid for s in samples if s.comm == "short_children"}
    assert len(sampled) > 300, f"only {len(sampled)} of the 400 children sampled"
    assert sum(drained) > 0, f"the map held no pid: {drained}"
    assert sampled <= announced, f"{len(sampled - announced)} sampled processes never announced"


def test_a_collect_takes_on_a_process_the_pid_watcher_has_not_read_yet():
    """A collect reads the wakeups ring itself before it names what it drained: a process whose
    record the pid watcher has not read yet (its round comes up to 0.1 s after the record) is read
    and looked at by the frame sources first, so its first interval keeps its runtime frames. Here
    the watcher never reads the ring."""
    with Engine(EngineConfig(frequency=499, comms=("python3",))) as prof:
        source = next(s for s in prof.runtimes if s.name == "python")
        sampler = prof.cpu
        real_clear = sampler.clear_wakeups

        def clear_but_in_the_watcher():
            if threading.current_thread().name != "hotstack-pids":
                real_clear()
        sampler.clear_wakeups = clear_but_in_the_watcher
        time.sleep(0.3)
        busy = subprocess.Popen(["/usr/bin/python3", "-c", "while True: sum(range(1000))"])
        try:
            time.sleep(1.0)
            assert busy.pid not in source._procs         # (the watcher read nothing)
            prof.collect()
            assert busy.pid in source._procs, "the collect did not take the process on"
        finally:
            busy.kill()
            busy.wait()


SHORT_C = r"""
#include <stdlib.h>
static volatile unsigned long sink;
#define HOT(n) __attribute__((noinline)) void short_inner##n(void) \
    { for (unsigned long i = 0; i < 40000000UL; i++) sink += i * n; } \
    __attribute__((noinline)) void short_hot##n(void) { short_inner##n(); sink++; }
HOT(0) HOT(1) HOT(2) HOT(3) HOT(4) HOT(5) HOT(6) HOT(7) HOT(8) HOT(9) HOT(10) HOT(11)
static void (*hot[])(void) = {short_hot0, short_hot1, short_hot2, short_hot3, short_hot4, short_hot5,
                              short_hot6, short_hot7, short_hot8, short_hot9, short_hot10, short_hot11};
int main(int argc, char **argv) { hot[atoi(argv[1])](); return 0; }
"""


def test_short_processes_of_a_known_image_are_noted_and_named_after_they_exit(tmp_path):
    """A loop of short runs of one program, each in functions of its own (so that no run's stacks,
    nor their callers, are named by another's through the kernel's file hashes): the first runs are
    read, the next ones
    noted from their announcement alone (where the kernel unwinder keeps the mappings it walks);
    every run has exited when its samples are named, the noted ones with the mappings the kernel
    kept: their samples are named as the read ones' are."""
    source = tmp_path / "short.c"
    source.write_text(SHORT_C)
    prog = tmp_path / "shortprog"
    subprocess.run(["cc", "-O1", "-g", str(source), "-o", str(prog)], check=True)
    with Engine(EngineConfig(frequency=499)) as prof:
        noted: list[int] = []
        note = prof.processes.note
        prof.processes.note = lambda pid, told, parent: noted.append(pid) or note(pid, told, parent)
        lazy_possible = all(s.native is not None and s.native_vma_walk for s in prof._started)
        prof.collect()
        subprocess.run(["sh", "-c", f"for i in 0 1 2 3 4 5 6 7 8 9 10 11; do {prog} $i; done"], check=True)
        time.sleep(0.2)
        samples = [s for s in prof.collect()[0].samples if s.comm == prog.name]
    runs = {s.pid for s in samples}
    assert len(runs) >= 8, runs

    def user(sample):
        return [f for f in sample.stack if f.kind is not FrameKind.KERNEL]

    # (a stack the kernel walked past its leaf: a first run's leaf-only stacks, before the program's
    # unwind table was built, are the kernel's, not naming's)
    walked = [s for s in samples if len(user(s)) > 1]
    named = [s for s in walked if all(f.resolved for f in user(s))]
    assert sum(s.value for s in named) >= 0.95 * sum(s.value for s in walked), \
        [[f.name for f in s.stack] for s in walked if s not in named][:5]
    if lazy_possible:
        noted_runs = runs & set(noted)
        assert len(noted_runs) >= 3, (noted, runs)
        assert sum(s.value for s in named if s.pid in noted_runs) >= 0.95 * sum(
            s.value for s in walked if s.pid in noted_runs)
        assert len({f.name for s in named if s.pid in noted_runs for f in s.stack
                    if f.name.startswith("short_hot")}) >= 3
