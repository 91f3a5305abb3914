"""The frame source: the one interface every language runtime implements so that its frames
replace the interpreter's or JIT's native frames in samples (the runtime's package in runtimes/,
one line in registry.FRAME_SOURCES).

The lifecycle, driven by the engine (sampling/engine.py), which never knows which runtime it is:

1. `prepare()` before the sampler loads: learn what the kernel half needs (e.g. offsets from
   the kernel's BTF). False: the source is off (native profiling goes on).
2. `detect(process)` for processes already running, before sampling starts, and
   `observe(process)` for each process seen later: memory reads only, no kernel. `process` is a
   procs.Process (the engine's are live ones; a test's may be recorded), the one way a source
   reads a process. A process that runs the runtime is
   remembered; `attach(kernel)` then lists those found so far, and `observe` lists later ones.
3. `attach(kernel)` once the sampler is loaded: `kernel` is a RuntimeKernel, this source's own
   maps by role (bpf/schema.yaml, a group with `runtime:`), so the source never names a map.
4. Every ~100 ms `poll(active_buffer)`: early reads (a process that exits before the interval
   ends keeps its names), retries of processes not ready yet. A source may say with `poll_in()`
   in how many seconds it wants its next poll (None: it follows no process), or with `tracking()`
   whether it follows any process now (then it is polled at every round); the engine's next round
   is the soonest any source wants, at most a second away (and sooner when a program queued work).
   (Both default to a source that follows no process.)
5. After a buffer is drained, `collect(buffer)` takes what the kernel recorded in it; then for
   each sample `merge(pid, key, native)` returns the native frames with the runtime's frames in
   place (`key` is the sample's runtime_stack, 0: none).
6. `forget(pid)` when the engine learns that `pid` exec'ed (then `observe(pid)` again), and
   `forget_dead()` between intervals: processes that exited or exec'ed are dropped.

7. At any time, for the front doors: `counters()` (the kernel walker's counters since the last
   call), `stats()` (for /metrics and the agent's debug info).

Optional capabilities have their defaults here, each said by a method of this class (never
probed with getattr): `final_merge` (a merge whose result may be kept and reused), `poll_in`,
`tracking`, `stats`.
"""

from __future__ import annotations

from typing import Iterable, Protocol

from ..procs import Process
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

    def hold_keys(self, keys: list[bytes]) -> None:
        """These stacks are held by userspace: the walker stores them no more."""

    def release_keys(self, keys: list[bytes]) -> None:
        """These are not held any longer: the walker stores them again."""

    def stored(self) -> int:
        """The stacks the walker stored so far; the same value: nothing new to name."""

    def snapshots(self) -> list[bytes]:
        """What the walker copied of the objects that name frames since the last call (Python's
        code objects, bpf/python.h); [] for a walker that copies none."""


class FrameSource:
    """The base of every runtime's frame source; see the module's lifecycle."""

    name: str = ""                       # its group in bpf/schema.yaml
    label: str = ""                      # the runtime as its users name it (CPython, Node.js ...)
    # words one of which is in the path of the executable, or of a file mapped executable, of
    # every process the source could follow (its first test, made by the engine once for every
    # source: a new process that names none is not looked at by the source); () : every process
    looks_for: tuple[str, ...] = ()

    def prepare(self) -> bool:
        """Before the sampler loads; False: this source cannot work on this host."""
        return True

    def detect(self, process: Process) -> bool:
        """A process running before sampling starts: True if it runs this runtime (remembered)."""
        raise NotImplementedError

    def attach(self, kernel: RuntimeKernel) -> None:
        """The sampler is loaded: `kernel` is this source's kernel half."""
        raise NotImplementedError

    def observe(self, process: Process) -> bool:
        """A process seen after the start: True if it runs this runtime (listed for the walker)."""
        raise NotImplementedError

    def poll(self, active_buffer: int) -> None:
        """Every pid watcher round: early naming, retries."""

    def poll_in(self) -> float | None:
        """Seconds until this source wants its next poll; None: it follows no process."""
        return None

    def tracking(self) -> bool:
        """Whether it follows processes now (then it is polled every round)."""
        return False

    def collect(self, buffer: int) -> None:
        """Take what the walker recorded in a drained buffer."""

    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]:
        """The native frames (leaf first) with this runtime's frames in place; `native` itself if
        none of them is this source's."""
        return native

    def final_merge(self, pid: int, key: int, native: list[Frame]) -> tuple[list[Frame], bool]:
        """merge(), and whether its result is named as it will stay (then it may be kept and
        reused for the same stack): a source whose merge depends on (pid, key, native) alone."""
        return self.merge(pid, key, native), False

    def forget(self, pid: int) -> None:
        """`pid` exec'ed: drop what was known of it."""

    def forget_dead(self) -> None:
        """Between intervals: drop processes that exited or exec'ed."""

    def counters(self) -> list[int]:
        """The walker's counter deltas since the last call (the schema's enum order)."""
        return []

    def stats(self) -> dict[str, int]:
        """For /metrics and the agent's debug info: processes listed now, and totals since the start."""
        return {}


__all__ = ["FrameSource", "RuntimeKernel"]
