"""The engine's first test for the frame sources (runtimes/registry.py runtime_words): a new process
whose executable and executable mappings name no runtime is looked at by none of them."""

from __future__ import annotations

import subprocess
import sys
import time

from hotstack.procs import LiveProcess, mapped
from hotstack.runtimes.registry import FRAME_SOURCES, DeferredSource, runtime_words
from hotstack.runtimes.plugin import FrameSource


class _Source(FrameSource):
    def __init__(self, *words):
        self.looks_for = words          # () : a source that looks at every process


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
        seen = mapped.exe_path(py.pid) + "\n" + mapped.exec_paths(py.pid)
        assert words.search(seen), seen
        seen = mapped.exe_path(other.pid) + "\n" + mapped.exec_paths(other.pid)
        assert "libc" in seen and words.search(seen) is None, seen
    finally:
        for p in (py, other):
            p.kill()
            p.wait()


def test_sources_but_cpythons_are_imported_and_built_at_their_first_process():
    """Importing and building the five sources other than CPython's had been ~50 ms of every
    start: they wait for a process that names one of their words (the classes' own)."""
    for make in FRAME_SOURCES.values():
        source = make()
        if isinstance(source, DeferredSource):
            assert source.built is None
            assert source.looks_for == type(source.build()).looks_for, source.name
            assert source.label == type(source.build()).label, source.name
    # a fresh interpreter: the engine's list of sources imports none of their modules
    code = ("import sys; from hotstack.runtimes.registry import frame_sources; frame_sources(); "
            "print(sorted({m.split('.')[2] for m in sys.modules if m.startswith('hotstack.runtimes.') "
            "and m.count('.') >= 3}))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "['common', 'python']", shown     # (the shared helpers, CPython's source)
    perl = FRAME_SOURCES["perl"]()
    other = subprocess.Popen(["sleep", "20"])
    script = subprocess.Popen(["perl", "-e", "sleep 20"])
    try:
        time.sleep(0.3)
        assert not perl.detect(LiveProcess(other.pid)) and not perl.observe(LiveProcess(other.pid))
        assert perl.built is None and perl.merge(other.pid, 1, []) == [] and perl.poll_in() is None
        perl.observe(LiveProcess(script.pid))
        assert type(perl.built).__name__ == "PerlSource"
        assert perl.stats() == perl.built.stats()      # (the rest of its interface: the source's own)
    finally:
        for p in (other, script):
            p.kill()
            p.wait()
