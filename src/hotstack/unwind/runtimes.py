"""Frame sources: the interface a language runtime (CPython; JVM, V8, Ruby ... later) implements
so that its frames replace the interpreter's native frames in samples.

The lifecycle, driven by the engine (sampling/engine.py), which never knows which runtime it is:

1. `prepare()` before the sampler loads: learn what the kernel half needs (e.g. offsets from
   the kernel's BTF). False: the source is off (native profiling goes on).
2. `detect(pid)` for processes already running, before sampling starts, and `observe(pid)` for
   each process seen later: memory reads only, no kernel. A process that runs the runtime is
   remembered; `attach(kernel)` then lists those found so far, and `observe` lists later ones.
3. `attach(kernel)` once the sampler is loaded: `kernel` is a RuntimeKernel, this source's own
   maps by role (bpf/schema.yaml, a group with `runtime:`), so the source never names a map.
4. Every ~100 ms `poll(active_buffer)`: early reads (a process that exits before the interval
   ends keeps its names), retries of processes not ready yet. A source may say with `poll_in()`
   in how many seconds it wants its next poll (None: it follows no process), or with `tracking()`
   whether it follows any process now (then it is polled at every round); the engine's next round
   is the soonest any source wants, at most a second away (and sooner when a program queued work).
   A source with neither is polled every round.
5. After a buffer is drained, `collect(buffer)` takes what the kernel recorded in it; then for
   each sample `merge(pid, key, native)` returns the native frames with the runtime's frames in
   place (`key` is the sample's runtime_stack, 0: none).
6. `forget(pid)` when the engine learns that `pid` exec'ed (then `observe(pid)` again), and
   `forget_dead()` between intervals: processes that exited or exec'ed are dropped.

Sources are listed in FRAME_SOURCES: a new runtime is one module and one line there.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Iterable, Protocol

from .. import procs
from ..profile.model import Frame


class RuntimeKernel(Protocol):
    """The kernel half of a frame source, by role: what the engine hands `attach()`."""

    def configure(self, value: int) -> None:
        """Set the source's tunable (before any process is listed)."""

    def track(self, pid: int, record: bytes) -> bool:
        """List a process for the kernel walker; False if the kernel has no room."""

    def ready(self) -> bool:
        """Load the walker now if it is not yet (track() does it at the first process); False if
        it cannot load here."""

    def untrack(self, pid: int) -> None: ...

    def recorded(self, buffer: int, skip=()) -> Iterable[tuple[bytes, bytes]]:
        """(key, record) pairs the walker stored so far in a buffer still being written, but
        those whose key is in `skip`."""

    def take(self, buffer: int) -> list[tuple[bytes, bytes]]:
        """(key, record) pairs of a drained buffer, removed from the kernel."""

    def counters(self) -> list[int]:
        """The walker's counters since the last call (the schema's enum order)."""

    def walks(self) -> int:
        """The walker's walks so far (its first counter); the same value: nothing new recorded."""

    # A walker that can be told which stacks userspace holds (Python's py_known):
    remembers: bool

    def know(self, keys: list[bytes]) -> None:
        """These stacks are held by userspace: the walker stores them no more."""

    def unknow(self, keys: list[bytes]) -> None:
        """These are not held any longer: the walker stores them again."""

    def stored(self) -> int:
        """The stacks the walker stored so far; the same value: nothing new to name."""


class FrameSource(Protocol):
    name: str      # its group in bpf/schema.yaml
    # (optional) words one of which is in the path of the executable, or of a file mapped
    # executable, of every process the source could follow (its first test, made by the engine
    # once for every source: a new process that names none is not looked at by the source)
    looks_for: tuple[str, ...]

    def prepare(self) -> bool: ...
    def detect(self, pid: int) -> bool: ...
    def attach(self, kernel: RuntimeKernel) -> None: ...
    def observe(self, pid: int) -> bool: ...
    def poll(self, active_buffer: int) -> None: ...
    def poll_in(self) -> float | None: ...
    def collect(self, buffer: int) -> None: ...
    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]: ...
    def forget(self, pid: int) -> None: ...
    def forget_dead(self) -> None: ...
    def counters(self) -> list[int]: ...


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


class DeferredSource:
    """A frame source whose module is imported, and which is built, prepared and attached, at the
    first process whose executable or executable mappings name one of its words (the source's
    own `looks_for`, given here so that nothing is imported before). Importing and building the
    five sources other than CPython's had been ~50 ms of CPU at every start (a tenth of
    `hotstack run`'s), on hosts that run none of those runtimes as on those that do. Until
    then it follows no process, and its merge leaves stacks as they are; what the engine's
    lifecycle does not name (stats(), counters() ...) builds it at once."""

    def __init__(self, name: str, make: Callable[[], FrameSource], looks_for: tuple[str, ...]) -> None:
        self.name = name
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

    def _for(self, pid: int) -> FrameSource | None:
        """The source, built if pid is the first process that names one of its words; else None."""
        if self._source is None and not names_a_word(self._words, pid):
            return None
        return self.build()

    def prepare(self) -> bool:
        return True       # (the source's own, when it is built: False then turns it off)

    def attach(self, kernel: RuntimeKernel) -> None:
        self._kernel = kernel
        if self._source:
            self._source.attach(kernel)

    def detect(self, pid: int) -> bool:
        source = self._for(pid)
        return source is not None and source.detect(pid)

    def observe(self, pid: int) -> bool:
        source = self._for(pid)
        return source is not None and source.observe(pid)

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

    @property
    def final_merge(self):
        return getattr(self._source, "final_merge", None) if self._source else None

    def forget(self, pid: int) -> None:
        if self._source:
            self._source.forget(pid)

    def forget_dead(self) -> None:
        if self._source:
            self._source.forget_dead()

    def __getattr__(self, name: str):
        # (only for names not found on the wrapper: never its own fields, which __init__ sets first,
        # nor Python's protocol names, which copy and pickle look up on any object)
        if name.startswith("__") or name in _DEFERRED_FIELDS:
            raise AttributeError(name)
        source = self.build()
        if source is None:
            raise AttributeError(f"{name}: the {self.name} frame source cannot work on this host")
        return getattr(source, name)


_DEFERRED_FIELDS = frozenset({"name", "looks_for", "_make", "_words", "_kernel", "_source", "_lock"})


# name -> factory. The engine builds each listed source when runtime frames are on; all but
# CPython's deferred (DeferredSource) with their classes' own `looks_for` (a test checks them).
FRAME_SOURCES: dict[str, Callable[[], FrameSource]] = {
    "python": _cpython,
    "v8": lambda: DeferredSource("v8", _v8, ("node",)),                                  # Node.js (unwind/v8/)
    "ruby": lambda: DeferredSource("ruby", _ruby, ("ruby",)),
    "php": lambda: DeferredSource("php", _php, ("php",)),
    "hotspot": lambda: DeferredSource("hotspot", _hotspot, ("/libjvm.so", "/libjli.so")),  # Java (unwind/hotspot/)
    "perl": lambda: DeferredSource("perl", _perl, ("perl",)),
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
        looks_for = getattr(source, "looks_for", None)
        if not looks_for:
            return None
        words.extend(looks_for)
    return re.compile("|".join(map(re.escape, words))) if words else None


def names_a_word(words: re.Pattern[str], pid: int) -> bool:
    """Whether the process's executable or one of its executable mappings holds one of `words`
    (runtime_words): the first test of a process for the frame sources (the paths as read this
    round, shared with the sources' own reads)."""
    return bool(words.search(procs.exe_path(pid, recent=True)) or words.search(procs.exec_paths(pid, recent=True)))
