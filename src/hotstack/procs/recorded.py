"""A process recorded into a directory (`record`), read back as a Process (RecordedProcess) with no
/proc, no root and no process alive: what tests of the runtimes' readers and the symbolizer run on.

The directory holds:
- process.json: its identity (pid, start time, comm, parent, executable path and image), its
  namespace pid, mount namespace, whether its root was the host's, its labels (cwd, command line,
  cgroup), and the index of the two below;
- maps: its /proc/PID/maps text as read;
- memory/START-END: the bytes of each recorded region (by default every readable mapping that is
  writable or anonymous, where a runtime keeps its state, and each file's RELRO part, which the
  loader wrote);
- files/DEV-INODE: a copy of each file it maps executable (the executable, its libraries).

Read back, a mapping of a copied file names the copy's device and inode (the copy is the file it
maps now), and a read of memory not recorded is served from the copy where the mapping is of one.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

from .info import ProcessInfo, read_process
from .labels import ProcessLabels
from .maps import Mapping, dev_field, parse_exec_maps, parse_maps
from .memory import MemoryReadError, check_span, read_memory
from .process import LiveProcess, Process

_NOT_MEMORY = ("[vvar]", "[vvar_vclock]", "[vsyscall]")
MAX_REGION = 256 << 20        # a larger region is not recorded (a reader never needs all of one)
_CHUNK = 1 << 20


def default_regions(m: Mapping) -> bool:
    """Whether `record` keeps the bytes of `m` by default: readable, writable or anonymous."""
    return "r" in m.perms and ("w" in m.perms or not m.is_file) and m.path not in _NOT_MEMORY


def relocated(mappings: list[Mapping]) -> set[tuple[int, int]]:
    """[start, end) of each read-only private mapping of a file just below a writable one of the
    same file: the loader's RELRO part (the GOT, .data.rel.ro), written at load and made read-only
    then, so its bytes are not the file's (a runtime reads its TLS module id there)."""
    return {(m.start, m.end) for m, above in zip(mappings, mappings[1:])
            if m.perms == "r--p" and m.is_file and m.end == above.start and above.perms.startswith("rw")
            and (above.dev, above.inode) == (m.dev, m.inode)}


def _read_region(pid: int, m: Mapping) -> bytes | None:
    """The bytes of a mapping, by chunks (a page that cannot be read is left as zeros); None if none
    of it can be read."""
    out = bytearray(m.end - m.start)
    read_any = False
    for at in range(m.start, m.end, _CHUNK):
        size = min(_CHUNK, m.end - at)
        try:
            out[at - m.start:at - m.start + size] = read_memory(pid, at, size)
            read_any = True
        except MemoryReadError:
            for page in range(at, at + size, 4096):
                try:
                    out[page - m.start:page - m.start + 4096] = read_memory(pid, page, 4096)
                    read_any = True
                except MemoryReadError:
                    pass
    return bytes(out) if read_any else None


def record(pid: int, directory: str | os.PathLike, regions: Callable[[Mapping], bool] = default_regions,
           stop: bool = False) -> Path:
    """Record the live process `pid` into `directory` (made; see the module's text): its identity,
    maps, the memory of the mappings `regions` keeps, copies of the files it maps executable. `stop`:
    hold it stopped (SIGSTOP, then SIGCONT) while its memory is read, for one consistent picture."""
    out = Path(directory)
    (out / "memory").mkdir(parents=True, exist_ok=True)
    (out / "files").mkdir(exist_ok=True)
    live = LiveProcess(pid)
    stat, image = live.stat(), live.image()
    labels = live.labels(True, True, True, True)
    if stat is None or labels is None:
        raise ProcessLookupError(f"pid {pid} is gone")
    text = live.maps_text()
    if stop:
        os.kill(pid, signal.SIGSTOP)
    try:
        memory = []
        mappings = parse_maps(text)
        written = relocated(mappings)
        for m in mappings:
            if m.end - m.start <= MAX_REGION and (regions(m) or (m.start, m.end) in written):
                data = _read_region(pid, m)
                if data is not None:
                    name = f"{m.start:x}-{m.end:x}"
                    (out / "memory" / name).write_bytes(data)
                    memory.append([m.start, m.end, name])
    finally:
        if stop:
            os.kill(pid, signal.SIGCONT)
    files = {}
    for m in parse_exec_maps(text):
        key = f"{m.dev}-{m.inode}"
        if m.is_file and key not in files:
            path = live.mapped_file_path(m)
            if path is not None:
                shutil.copyfile(path, out / "files" / key)
                files[key] = key
    facts = {"pid": pid, "start_time": stat[0], "comm": stat[1], "ppid": stat[2], "exe": live.exe_path(),
             "image": list(image) if image else None, "namespace_pid": live.namespace_pid(),
             "mntns": live.mount_namespace(), "root_is_host": live.root_is_host(),
             "labels": {"exe": labels.exe, "cwd": labels.cwd, "commandline": labels.commandline,
                        "cgroup": labels.cgroup},
             "memory": memory, "files": files}
    (out / "maps").write_text(text)
    (out / "process.json").write_text(json.dumps(facts, indent=1))
    return out


def _maps_line(m: Mapping) -> str:
    return f"{m.start:x}-{m.end:x} {m.perms} {m.offset:08x} {m.dev} {m.inode} {m.path}"


class RecordedProcess(Process):
    """A process `record` wrote into `directory`, read from there alone."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        facts = json.loads((self.directory / "process.json").read_text())
        self.facts = facts
        self.pid = facts["pid"]
        # (recorded device, inode) -> the copy, with the copy's device and inode as maps writes them
        self._copies: dict[tuple[str, int], tuple[str, str, int]] = {}
        for key, name in facts["files"].items():
            dev, _, inode = key.rpartition("-")
            path = str(self.directory / "files" / name)
            st = os.stat(path)
            self._copies[(dev, int(inode))] = (path, dev_field(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino)
        self._mappings = [self._as_copy(m) for m in parse_maps((self.directory / "maps").read_text())]
        self._maps_text = "".join(_maps_line(m) + "\n" for m in self._mappings)
        self._copy_of = {(c[1], c[2]): c[0] for c in self._copies.values()}
        self._regions = sorted(facts["memory"])
        self._starts = [r[0] for r in self._regions]
        self._bytes: dict[str, bytes] = {}
        image = self._copy_of_image(facts["image"])
        self._image = image

    def _as_copy(self, m: Mapping) -> Mapping:
        copy = self._copies.get((m.dev, m.inode))
        return m if copy is None else m._replace(dev=copy[1], inode=copy[2])

    def _copy_of_image(self, image: list | None) -> tuple | None:
        """The (device, inode) of the executable's copy, else as recorded."""
        if image is None:
            return None
        copy = self.exe_file()
        if copy:
            st = os.stat(copy)
            return (st.st_dev, st.st_ino)
        return tuple(image)

    def exe_file(self) -> str:
        """The copy of its executable ('' if it was not copied)."""
        for m in self._mappings:
            if m.path == self.facts["exe"] and (m.dev, m.inode) in self._copy_of:
                return self._copy_of[(m.dev, m.inode)]
        return ""

    def __repr__(self) -> str:
        return f"RecordedProcess({str(self.directory)!r})"

    def stat(self) -> tuple[int, str, int] | None:
        return self.facts["start_time"], self.facts["comm"], self.facts["ppid"]

    def image(self) -> tuple | None:
        return self._image

    def exe_path(self, recent: bool = False) -> str:
        return self.facts["exe"]

    def maps_text(self, recent: bool = False) -> str:
        return self._maps_text

    def exec_maps(self, recent: bool = False) -> list[Mapping]:
        return [m for m in self._mappings if m.executable]

    def all_mappings(self) -> list[Mapping]:
        return list(self._mappings)

    def read(self, address: int, size: int) -> bytes:
        if size <= 0:
            return b""
        check_span(address, size)
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and address + size <= self._regions[i][1]:
            start, _end, name = self._regions[i]
            data = self._bytes.get(name)
            if data is None:
                data = self._bytes[name] = (self.directory / "memory" / name).read_bytes()
            return data[address - start:address - start + size]
        return self._read_file(address, size)

    def _read_file(self, address: int, size: int) -> bytes:
        """Bytes of a file-backed mapping not recorded, from the file's copy."""
        for m in self._mappings:
            if m.start <= address and address + size <= m.end and (m.dev, m.inode) in self._copy_of:
                with open(self._copy_of[(m.dev, m.inode)], "rb") as f:
                    f.seek(m.offset + address - m.start)
                    data = f.read(size)
                if len(data) == size:
                    return data
        raise MemoryReadError(f"{self!r}: {size} bytes at {address:#x} were not recorded")

    def map_file(self, mapping: Mapping) -> str:
        return self._copy_of.get((mapping.dev, mapping.inode), "")

    def map_file_at(self, start: int, end: int) -> str:
        for m in self._mappings:
            if (m.start, m.end) == (start, end):
                return self.map_file(m)
        return ""

    def mapped_file_path(self, mapping: Mapping) -> str | None:
        return self._copy_of.get((mapping.dev, mapping.inode))

    def root(self) -> str:
        return ""

    def root_is_host(self) -> bool:
        return bool(self.facts["root_is_host"])

    def mount_namespace(self) -> int:
        return self.facts["mntns"]

    def namespace_pid(self) -> int:
        return self.facts["namespace_pid"]

    def labels(self, exe: bool, cwd: bool, commandline: bool, cgroup: bool) -> ProcessLabels | None:
        known = self.facts["labels"]
        return ProcessLabels(known["exe"] if exe else "", known["cwd"] if cwd else "",
                             known["commandline"] if commandline else "", known["cgroup"] if cgroup else "")

    def info(self) -> ProcessInfo | None:
        """Its ProcessTable entry, as the table reads a live process's (not alive: never read again)."""
        info = read_process(self.pid, process=self)
        if info is not None:
            info.alive = False
        return info
