"""Helpers of the Python-frame tests (imported by conftest.py and the tests)."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import textwrap
import time
from pathlib import Path

from tests.conftest import ReadyProcess

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=20).stdout.split()
        return (int(out[0]), int(out[1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def discover() -> list[tuple[str, str]]:
    """(id, path) of each interpreter, one per (source, minor version)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found: dict[str, str] = {}
    for path in sorted(glob.glob(f"{root}/versions/3.*/bin/python3.*")):
        if not re.search(r"python3\.\d+$", path):
            continue
        v = _version(path)
        if v and v >= (3, 8):
            found.setdefault(f"pyenv-{v[0]}.{v[1]}", path)
    system = "/usr/bin/python3"
    if os.path.exists(system) and (v := _version(system)) and v >= (3, 8):
        found[f"system-{v[0]}.{v[1]}"] = system
    elif os.environ.get("CI") == "true":
        raise RuntimeError("/usr/bin/python3 is missing: .ci/install.d/python.sh installs it")
    return sorted(found.items())


INTERPRETERS = discover()

# Debian unstable's interpreters (rootfs.sh's python3 and python3.15), run in its root filesystem by
# chroot, where that root is cached and the tests run as root: for the tests marked
# `debian_unstable` (conftest.py), whose programs need nothing of the host's files. Their `python` is
# IN_ROOT + the program's name; Target runs it in the root (chroot execs it: the pid is the
# interpreter's).
IN_ROOT = "chroot:sid:"
DEBIAN_UNSTABLE = ("python3.14", "python3.15")


def debian_unstable() -> list[tuple[str, str]]:
    """(id, python) of each of Debian unstable's interpreters, or none without its root or root."""
    from tests.runtimes.matrix import ROOTFS
    if os.geteuid() != 0 or not (ROOTFS / "sid.tar").exists():
        return []
    return [(f"sid-{program.removeprefix('python')}", IN_ROOT + program) for program in DEBIAN_UNSTABLE]


# Sleeps in a known nest of functions, in the main thread and in a second thread, and reports
# the ids of the threads, the line table of every code object the interpreter agrees on and where
# Py_GetVersion is loaded (dlsym's answer: a native address to name).
NEST = textwrap.dedent('''
    import ctypes, dis, json, sys, threading, time
    def leaf(ev):
        ev.set()
        while True:
            time.sleep(0.05)
    def middle(ev):
        leaf(ev)
    class Outer:
        def run(self, ev):
            middle(ev)
    def worker_body(ev):
        while True:
            time.sleep(0.05)
    def lines(co):
        if hasattr(co, "co_lines"):
            out = [(start // 2, line) for start, end, line in co.co_lines() for _ in [0] if line is not None
                   for start in range(start, end, 2)]
        else:
            out = []
            starts = dict(dis.findlinestarts(co))
            line = co.co_firstlineno
            for off in range(0, len(co.co_code), 2):
                line = starts.get(off, line)
                out.append((off, line))
        return out
    codes = {}
    for f in (leaf, middle, Outer.run, worker_body, lines):
        codes[id(f.__code__)] = {"name": f.__qualname__ if sys.version_info >= (3, 11) else f.__name__,
                                 "first": f.__code__.co_firstlineno, "lines": lines(f.__code__)}
    ready, ready2 = threading.Event(), threading.Event()
    t = threading.Thread(target=worker_body, args=(ready2,), daemon=True, name="worker")
    t.start()
    def report():
        ready.wait()
        print(json.dumps({"main": threading.main_thread().ident, "worker": t.ident, "codes": codes,
                          "version": list(sys.version_info[:2]),
                          "Py_GetVersion": ctypes.cast(ctypes.pythonapi.Py_GetVersion, ctypes.c_void_p).value}),
              flush=True)
    threading.Thread(target=report, daemon=True).start()
    Outer().run(ready)
''')


class Target(ReadyProcess):
    """A Python program (`script`, run by -c) started by a test; it prints one line of JSON when ready."""

    def __init__(self, python: str, script: str, *args: str, stdin: bool = False) -> None:
        if python.startswith(IN_ROOT):
            from tests.runtimes.matrix import extracted
            python_argv = ["chroot", str(extracted("sid")), "/usr/bin/" + python.removeprefix(IN_ROOT)]
        else:
            python_argv = [python]
        super().__init__([*python_argv, "-c", script, *args], stdin=stdin)

    def go(self) -> None:
        """Release a target that waits for a line on stdin."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()


def python_source_listing(prof, pid: int, timeout: float = 10.0):
    """The engine's CPython source once it has listed `pid` (asserts that it did within `timeout`)."""
    source = next(src for src in prof.runtimes if src.name == "python")
    deadline = time.monotonic() + timeout
    while pid not in source._procs and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid in source._procs, "the Python process was not listed"
    return source
