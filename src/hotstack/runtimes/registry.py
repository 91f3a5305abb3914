"""The frame sources hotstack has, one a runtime (FRAME_SOURCES), each built when it can be
useful: CPython's at once, the others (DeferredSource) at the first process that names one of
their words, so that a host that runs none of those runtimes imports none of their modules. The
interface and its lifecycle: plugin.py.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from .. import procs
from ..profile.model import Frame
from .common.files import launched_runtimes
from .plugin import FrameSource, RuntimeKernel


def _cpython() -> FrameSource:
    from .python.source import CPythonSource
    return CPythonSource()


def _v8() -> FrameSource:
    from .v8.source import V8Source
    return V8Source()


def _ruby() -> FrameSource:
    from .ruby.source import RubySource
    return RubySource()


def _php() -> FrameSource:
    from .php.source import PhpSource
    return PhpSource()


def _hotspot() -> FrameSource:
    from .hotspot.source import HotSpotSource
    return HotSpotSource()


def _perl() -> FrameSource:
    from .perl.source import PerlSource
    return PerlSource()


class DeferredSource(FrameSource):
    """A frame source whose module is imported, and which is built, prepared and attached, at the
    first process whose executable or executable mappings name one of its words (the source's
    own `looks_for`, given here so that nothing is imported before). Importing and building the
    five sources other than CPython's costs ~50 ms of CPU (a tenth of a `hotstack run` start),
    on hosts that run none of those runtimes as on those that do. Until
    then it follows no process, and its merge leaves stacks as they are."""

    def __init__(self, name: str, make: Callable[[], FrameSource], looks_for: tuple[str, ...], label: str) -> None:
        self.name = name
        self.label = label
        self.looks_for = looks_for
        self._make = make
        self._words = runtime_words([self])
        self._kernel: RuntimeKernel | None = None
        self._source: FrameSource | None | bool = None     # built; False: it cannot work on this host
        self._lock = threading.Lock()

    @property
    def built(self) -> FrameSource | None:
        return self._source or None

    def build(self) -> FrameSource | None:
        """The source, built now if it was not (None if it cannot work on this host)."""
        with self._lock:
            if self._source is None:
                source = self._make()
                if source.prepare():
                    if self._kernel is not None:
                        source.attach(self._kernel)
                    self._source = source
                else:
                    self._source = False
        return self._source or None

    def _for(self, process: procs.Process) -> FrameSource | None:
        """The source, built if `process` is the first that names one of its words; else None."""
        if self._source is None and not names_a_word(self._words, process, self.name):
            return None
        return self.build()

    def prepare(self) -> bool:
        return True       # (the source's own, when it is built: False then turns it off)

    def attach(self, kernel: RuntimeKernel) -> None:
        self._kernel = kernel
        if self._source:
            self._source.attach(kernel)

    def detect(self, process: procs.Process) -> bool:
        source = self._for(process)
        return source is not None and source.detect(process)

    def observe(self, process: procs.Process) -> bool:
        source = self._for(process)
        return source is not None and source.observe(process)

    def poll(self, active_buffer: int) -> None:
        if self._source:
            self._source.poll(active_buffer)

    def poll_in(self) -> float | None:
        return self._source.poll_in() if self._source else None

    def tracking(self) -> bool:
        return bool(self._source) and self._source.tracking()

    def collect(self, buffer: int) -> None:
        if self._source:
            self._source.collect(buffer)

    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]:
        return self._source.merge(pid, key, native) if self._source else native

    def final_merge(self, pid: int, key: int, native: list[Frame]) -> tuple[list[Frame], bool]:
        return self._source.final_merge(pid, key, native) if self._source else (native, False)

    def forget(self, pid: int) -> None:
        if self._source:
            self._source.forget(pid)

    def forget_dead(self) -> None:
        if self._source:
            self._source.forget_dead()

    def counters(self) -> list[int]:
        return self._source.counters() if self._source else []

    def stats(self) -> dict[str, int]:
        """The built source's; {} until a process of its runtime was met (a read of the metrics
        builds nothing: built after its engine closed, a source set its walker's tunable in a map
        already closed)."""
        return self._source.stats() if self._source else {}


# name -> factory. The engine builds each listed source when runtime frames are on; all but
# CPython's deferred (DeferredSource) with their classes' own `looks_for` (a test checks them).
FRAME_SOURCES: dict[str, Callable[[], FrameSource]] = {
    "python": _cpython,
    "v8": lambda: DeferredSource("v8", _v8, ("node",), "Node.js"),                                  # Node.js (runtimes/v8/)
    "ruby": lambda: DeferredSource("ruby", _ruby, ("ruby",), "Ruby"),
    "php": lambda: DeferredSource("php", _php, ("php",), "PHP"),
    "hotspot": lambda: DeferredSource("hotspot", _hotspot, ("/libjvm.so", "/libjli.so"), "Java"),  # Java (runtimes/hotspot/)
    "perl": lambda: DeferredSource("perl", _perl, ("perl",), "Perl"),
}


def frame_sources(enabled: bool = True, off: tuple[str, ...] = ()) -> list[FrameSource]:
    """The sources that can work on this host (prepare() succeeded), but those named in `off`."""
    if not enabled:
        return []
    off = frozenset(off)
    out = []
    for name, make in FRAME_SOURCES.items():
        if name in off:
            continue
        source = make()
        if source.prepare():
            out.append(source)
    return out


def runtime_words(sources: list[FrameSource]) -> re.Pattern[str] | None:
    """One pattern of every source's `looks_for` words (a path that holds none is followed by no
    source); None where a source has none (it looks at every process itself)."""
    words: list[str] = []
    for source in sources:
        looks_for = source.looks_for
        if not looks_for:
            return None
        words.extend(looks_for)
    return re.compile("|".join(map(re.escape, words))) if words else None


def names_a_word(words: re.Pattern[str], process: procs.Process, runtime: str = "") -> bool:
    """Whether the process's executable or one of its executable mappings holds one of `words`
    (runtime_words), or its executable is a runtime's launcher by what the file holds (a copy or a
    renamed one: common/files.launched_runtimes, each executable read once). It is the first test of a
    process for the frame sources (the paths as read this round, shared with the sources' own reads).
    `runtime`: that runtime's launcher only."""
    if words.search(process.exe_path(recent=True)) or words.search(process.exec_paths(recent=True)):
        return True
    launched = launched_runtimes(process)
    return runtime in launched if runtime else bool(launched)
