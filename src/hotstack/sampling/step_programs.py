"""The kernel unwinder's step program in nu_progs[0]: one of four variants of bpf/profile.bpf.c's.

With or without the runtime hooks (V8, HotSpot: once their first process is found,
runtime_maps.py), and shallow or deep. A shallow one walks NU_LIST_FRAMES_PER_PROG frames a tail
call (155 a walk); a deep one NU_FRAMES_PER_PROG (NU_MAX_FRAMES a walk), at six times the verifier's
work: ~0.5 CPU-s when it is put in place. Sampling starts shallow; the first walk cut at the
shallow program's last tail call (NU_STAT_SHALLOW_CUT, with a wake-up of the unwind thread) makes
the deep one take its place, for the rest of the session, but for the runtime hooks: they come
shallow, and deep again at the next cut walk. Where the kernel unwinder keeps
mapping lists (kernels before 6.1) the two are the same walk and the shallow one stays.
"""

from __future__ import annotations

import logging
import struct
import threading

from .. import ebpf

log = logging.getLogger(__name__)

_U32 = struct.Struct("<I")
DEEP_SUFFIX = "_deep"
SHALLOW_FRAMES = 155        # a shallow walk's frames: 31 step programs of NU_LIST_FRAMES_PER_PROG


class StepPrograms:
    """Which step program is in nu_progs[0], and putting another in its place (thread-safe)."""

    def __init__(self, collection: ebpf.Collection, plain: str, deep_walks: bool) -> None:
        self._collection = collection
        self._plain = plain
        self._hooked: str | None = None      # the hooked variant's name, once a runtime asked for it
        self._deep = False
        # a deep variant only where the kernel walks the VMA tree (with mapping lists, the same walk)
        self._can_deepen = deep_walks and plain + DEEP_SUFFIX in collection.spec.programs
        self._lock = threading.Lock()
        self._tried = False       # the deep variant was tried (a refusal is not verified again)
        self._cuts_before: int | None = 0     # shallow_cut's value when the shallow program came

    @property
    def deepened(self) -> bool:
        """Whether the deep variant is in place."""
        return self._deep

    @property
    def may_deepen(self) -> bool:
        """Whether deepen_if_cut may still put the deep variant in place."""
        return self._can_deepen and not self._tried

    @property
    def current(self) -> str:
        name = self._hooked or self._plain
        return name + DEEP_SUFFIX if self._deep else name

    def start(self) -> None:
        """The plain shallow program in place (it is loaded with the collection)."""
        self._install(self.current)

    def with_runtime_hooks(self, hooked: str) -> None:
        """The hooked variant in place, shallow; raises what its load raised, the program in place
        unchanged. Its first process's runtime frames wait for this load (a JVM's or node's
        threads keep the CPUs busy meanwhile), and the deep variant's verification is six times
        the shallow one's: where the deep plain variant was in place, the hooked one goes deep at
        the next walk cut at its frames (deepen_if_cut), its deep stacks [truncated] until then."""
        with self._lock:
            if self._hooked == hooked:
                return
            self._install(hooked)
            self._hooked = hooked
            if self._deep:
                self._deep = self._tried = False
                self._cuts_before = None        # (the counter's value at the next call: its base)

    def deepen_if_cut(self, cut: int) -> bool:
        """The deep variant in place if a shallow walk was cut (`cut`: the kernel unwinder's
        shallow_cut counter). True if it was put in place now. A variant the kernel refuses is
        said once and the shallow one stays."""
        if not self.may_deepen:
            return False
        with self._lock:
            if self._cuts_before is None:
                self._cuts_before = cut
            if self._tried or cut <= self._cuts_before:
                return False
            self._tried = True
            name = (self._hooked or self._plain) + DEEP_SUFFIX
            try:
                self._install(name)
            except (ebpf.EbpfError, OSError, ValueError, KeyError) as e:
                log.warning("native stacks stay cut at %d frames: the kernel refused %s: %s", SHALLOW_FRAMES, name, e)
                return False
            self._deep = True
            log.info("a native stack was deeper than %d frames: %s in place", SHALLOW_FRAMES, name)
            return True

    def _install(self, name: str) -> None:
        program = self._collection.programs.get(name) or self._collection.load_deferred(name)
        self._collection.maps["nu_progs"].update(_U32.pack(0), _U32.pack(program.fd))
