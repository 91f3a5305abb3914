"""The engine's first test for the frame sources (unwind/runtimes.py runtime_words): a new process
whose executable and executable mappings name no runtime is looked at by none of them."""

from __future__ import annotations

import subprocess
import sys
import time

from hotstack.procs import process
from hotstack.unwind.runtimes import FRAME_SOURCES, runtime_words


class _Source:
    def __init__(self, *words):
        if words:
            self.looks_for = words


def test_one_pattern_of_every_sources_words_and_none_without():
    words = runtime_words([_Source("python"), _Source("/libjvm.so", "/libjli.so")])
    assert words.search("/usr/bin/python3.11") and words.search("/opt/jdk/lib/server/libjvm.so")
    assert words.search("/usr/lib/x86_64-linux-gnu/libc.so.6\n/usr/bin/xz") is None
    assert words.search("/opt/libjvmso") is None          # (words, not patterns)
    assert runtime_words([_Source("python"), _Source()]) is None
    assert runtime_words([]) is None


def test_every_source_has_words_and_its_runtimes_processes_name_them(tmp_path):
    # each source's words: the engine's test would pass over no source at all otherwise
    sources = [make() for make in FRAME_SOURCES.values()]
    assert all(getattr(s, "looks_for", ()) for s in sources), [s.name for s in sources]
    words = runtime_words(sources)
    # a Python process (its executable or libpython mapped executable) passes; sleep does not
    py = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    other = subprocess.Popen(["sleep", "20"])
    try:
        time.sleep(0.3)
        seen = process.exe_path(py.pid) + "\n" + process.exec_paths(py.pid)
        assert words.search(seen), seen
        seen = process.exe_path(other.pid) + "\n" + process.exec_paths(other.pid)
        assert "libc" in seen and words.search(seen) is None, seen
    finally:
        for p in (py, other):
            p.kill()
            p.wait()
