"""Images whose processes name no language runtime: their next processes are noted, not read.

An image is what a program's announcement tells of a process (bpf/pids.h announcement_facts):
its executable's inode, its name, its mount namespace. One whose process, read once its libraries
were loaded, named no runtime (a shell loop's commands, a build's compiler passes) is plain. The
engine records its next processes from their announcement alone (Engine._noted_from_announcement), and the kernel
announces them without waking the pid watcher (the set is copied into each sampler's
plain_images map): nothing about them is urgent, the next round takes them.

The copy in the kernel is a hint for the wake-up only: what is noted is decided here, so a copy
behind by a moment (an image found to run a runtime, a clear) delays a read by one round at most.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

# At most this many images remembered (each kind), the set cleared when full.
MAX_PLAIN_IMAGES = 4096
# the C library's file names (glibc, musl): mapped once the dynamic loader has loaded a program's
# libraries (learn)
_LIBC = re.compile(r"^(libc\.so|libc-[0-9]|ld-musl-)")

ImageKey = tuple[int, str, int]


def image_key(told) -> ImageKey:
    """An image as announcements tell it: its executable's inode, its name, the mount namespace."""
    return (told.exe_ino, told.comm, told.mntns)


def _told_image(told) -> bool:
    return told is not None and bool(told.exe_ino) and bool(told.mntns)


class PlainImages:
    def __init__(self) -> None:
        self._plain: set[ImageKey] = set()
        # images whose noted processes' stacks needed mappings the kernel no longer had: read always
        self._read: set[ImageKey] = set()
        self._quiet: list = []      # samplers whose announcements of plain images wake no one

    def quiet_in(self, samplers: Iterable) -> None:
        """From now on these samplers' programs announce processes of plain images without a
        wake-up (Sampler.mark_plain)."""
        self._quiet = list(samplers)
        for key in self._plain:
            self._mark(key, True)

    def __contains__(self, told) -> bool:
        return _told_image(told) and image_key(told) in self._plain

    def learn(self, told, info) -> None:
        """Remember the image of a process that names no runtime, read once its libraries were
        loaded (libc mapped, or its executable alone: a static program). A read made before the
        dynamic loader mapped them (a process read at once after its exec) tells nothing of the
        libraries it links."""
        if info is None or not _told_image(told) or image_key(told) in self._read:
            return
        files = {m.path for m in info.mappings.mappings if m.is_file}
        if not files or not (files <= {info.exe} or any(_LIBC.match(posixpath.basename(f)) for f in files)):
            return
        key = image_key(told)
        if key in self._plain:
            return
        if len(self._plain) >= MAX_PLAIN_IMAGES:
            for old in self._plain:
                self._mark(old, False)
            self._plain.clear()
        self._plain.add(key)
        self._mark(key, True)

    def runs_runtime(self, told) -> None:
        """A process of the image mapped a runtime after it was read (a dlopen): not plain."""
        self._discard(image_key(told))

    def lost_mappings(self, told) -> None:
        """A noted process of the image exited with mappings the kernel's cache had lost: its next
        processes are read."""
        key = image_key(told)
        self._discard(key)
        if len(self._read) >= MAX_PLAIN_IMAGES:
            self._read.clear()
        self._read.add(key)

    def _discard(self, key: ImageKey) -> None:
        if key in self._plain:
            self._plain.discard(key)
            self._mark(key, False)

    def _mark(self, key: ImageKey, plain: bool) -> None:
        for sampler in self._quiet:
            sampler.mark_plain(key, plain)
