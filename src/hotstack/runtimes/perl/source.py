"""PerlSource: the Perl frame source (runtimes/registry.py), on the model of RubySource and PhpSource.

Frames are named from the target's memory as Perl's caller() names them: a sub `Package::sub`
(its glob's name and the glob's package; anonymous subs are `Package::__ANON__`, lexical subs
named by their own name and package), `(eval)` for an eval, `<main>` for the main program, each
with the file and line of the statement the frame is at. Names are cached per (process, CV), files
and lines per (process, COP); a sub that no longer reads as one (freed) gives `[unknown perl]`.
Each `Perl_runops_standard` native frame is replaced by the frames that call of the runloop ran
(frames.py: a group ends after a frame entered from C, or where an inner runloop's stack began).
"""

from __future__ import annotations

import struct

from ... import procs
from ...bpf import schema
from ...profile.model import Frame, FrameKind
from ..common.interpreter_source import InterpreterSource
from ..common.memory import MemoryReadError, Process
from ..common.merge import ROOT_FRAMES, merge
from ..common.walker_totals import WalkerTotals
from .detect import PerlProcess, detect
from .frames import RawPerlFrame, parse_stack, vm_groups
from .offsets import CVF_NAMED, SVT_MASK, SVT_PVCV, SVT_PVGV, SVT_PVHV, PerlOffsets

RUNLOOPS = frozenset({"Perl_runops_standard", "Perl_runops_debug"})
MAIN = "<main>"
EVAL = "(eval)"
UNKNOWN = "[unknown perl]"
MAX_STRING = 1024
MAX_CACHED = 50_000
SVF_OOK = 0x02000000      # a hash with its aux struct (a stash has one: its name is there)
_PAGE = 4096


def is_runloop(frame: Frame) -> bool:
    return frame.name in RUNLOOPS


def read_cstring(mem: Process, address: int, limit: int = MAX_STRING) -> str:
    """A NUL-terminated string, read a page at most at a time (never across into an unmapped one)."""
    out = b""
    while len(out) < limit:
        chunk = mem.read(address + len(out), min(_PAGE - (address + len(out)) % _PAGE, limit - len(out)))
        end = chunk.find(b"\0")
        if end >= 0:
            return (out + chunk[:end]).decode("utf-8", "replace")
        out += chunk
    return out.decode("utf-8", "replace")


def read_hek(mem: Process, o: PerlOffsets, hek: int) -> str:
    length = mem.i32(hek + o.hek_len)
    if not 0 <= length <= MAX_STRING:
        raise MemoryReadError(f"{hek:#x} is not a hash key")
    return mem.read(hek + o.hek_key, length).decode("utf-8", "replace") if length else ""


def _sv_type(mem: Process, o: PerlOffsets, sv: int) -> int:
    return mem.u32(sv + o.sv_flags) & SVT_MASK


def stash_name(mem: Process, o: PerlOffsets, hv: int) -> str:
    """HvNAME of a package's stash ("" if it has none)."""
    if not hv:
        return ""
    flags = mem.u32(hv + o.sv_flags)
    if flags & SVT_MASK != SVT_PVHV:
        raise MemoryReadError(f"{hv:#x} is not a stash")
    if not flags & SVF_OOK:
        return ""
    body = mem.u64(hv + o.sv_any)
    if o.hv_aux_in_body:
        aux = body + o.hv_aux_offset
    else:       # 5.34 and older: after the bucket array
        aux = mem.u64(hv + o.sv_u) + (mem.u64(body + o.xhv_max) + 1) * 8
    name = mem.u64(aux + o.aux_name)
    if name and mem.i32(aux + o.aux_name_count):
        name = mem.u64(name)        # HvNAME_HEK_NN: the first of several names
    return read_hek(mem, o, name) if name else ""


def sub_name(mem: Process, o: PerlOffsets, cv: int) -> str:
    """`Package::sub` of a CV, as caller() names it."""
    if _sv_type(mem, o, cv) != SVT_PVCV:
        raise MemoryReadError(f"{cv:#x} is not a sub")
    body = mem.u64(cv + o.sv_any)
    gv = mem.u64(body + o.xcv_gv)
    if not gv:
        raise MemoryReadError(f"sub {cv:#x} has no name")
    if mem.u32(body + o.xcv_flags) & CVF_NAMED:     # a lexical sub: its own name and package
        name, stash = read_hek(mem, o, gv), mem.u64(body + o.xcv_stash)
    else:
        if _sv_type(mem, o, gv) != SVT_PVGV:
            raise MemoryReadError(f"sub {cv:#x}: {gv:#x} is not a glob")
        gv_body = mem.u64(gv + o.sv_any)
        name, stash = read_hek(mem, o, mem.u64(gv_body + o.xgv_name_hek)), mem.u64(gv_body + o.xgv_stash)
    package = stash_name(mem, o, stash)
    return f"{package}::{name}" if package else name


def cop_place(mem: Process, o: PerlOffsets, cop: int, threaded: bool) -> tuple[str, int]:
    """(file, line) of a statement (COP)."""
    line = mem.u32(cop + o.cop_line)
    ptr = mem.u64(cop + o.cop_file)
    if not ptr:
        return "", line
    if threaded:
        return read_cstring(mem, ptr), line
    gv_body = mem.u64(ptr + o.sv_any)      # the file's glob, named "_<file"
    return read_hek(mem, o, mem.u64(gv_body + o.xgv_name_hek)).removeprefix("_<"), line


class _Process:
    def __init__(self, proc: PerlProcess, process: procs.ProcessInfo | None) -> None:
        self.proc = proc
        self.process = process
        self.subs: dict[int, str | None] = {}
        self.places: dict[int, tuple[str, int] | None] = {}
        self.sub_files: dict[int, str] = {}     # CV -> the file its statements were last seen in


class PerlSource(InterpreterSource):
    """Thread-safe: observe() and poll() run on the engine's pid watcher thread."""

    name = "perl"
    label = "Perl"
    looks_for = ("perl",)         # (detect: perl* executables only)
    proc_record = schema.PERL_PROC

    def __init__(self) -> None:
        super().__init__()
        self._procs: dict[int, _Process] = {}
        self._totals = WalkerTotals(schema.PERL_STAT_MAX)
        self.reads = self.misses = 0

    def _find(self, process: procs.Process) -> PerlProcess | None:
        return detect(process)

    def _entry(self, proc: PerlProcess, process: procs.ProcessInfo | None) -> _Process:
        return _Process(proc, process)

    def _parse(self, raw: bytes) -> tuple[list[RawPerlFrame], bool, int]:
        return parse_stack(raw)

    def _name_early(self, pid: int, entry: _Process, frames: list[RawPerlFrame]) -> None:
        for f in frames:
            if f.kind != "runlevel":
                self._frame(pid, entry, f)

    def _sub(self, mem: Process, entry: _Process, cv: int) -> str | None:
        if cv in entry.subs:
            return entry.subs[cv]
        self.reads += 1
        try:
            name = sub_name(mem, entry.proc.offsets, cv)
        except (MemoryReadError, struct.error, IndexError):
            name = None
        if len(entry.subs) >= MAX_CACHED:
            entry.subs.clear()
        entry.subs[cv] = name
        return name

    def _place(self, mem: Process, entry: _Process, cop: int) -> tuple[str, int] | None:
        if cop in entry.places:
            return entry.places[cop]
        try:
            place = cop_place(mem, entry.proc.offsets, cop, entry.proc.binary.threaded) if cop else None
        except (MemoryReadError, struct.error, IndexError):
            place = None
        if len(entry.places) >= MAX_CACHED:
            entry.places.clear()
        entry.places[cop] = place
        return place

    def _frame(self, pid: int, entry: _Process, f: RawPerlFrame) -> Frame:
        mem = entry.proc.memory
        if f.kind == "main":
            name = MAIN
        elif f.kind == "eval":
            name = EVAL
        else:
            name = self._sub(mem, entry, f.cv)
            if name is None:
                return Frame(UNKNOWN, FrameKind.PERL, resolved=False)
        place = self._place(mem, entry, f.cop)
        if place is None:
            # no statement (a sub entered or being left: frames.frames_of): its file, no line
            return Frame(name, FrameKind.PERL, file=entry.sub_files.get(f.cv, "") if f.cv else "")
        if f.cv:
            if len(entry.sub_files) >= MAX_CACHED:
                entry.sub_files.clear()
            entry.sub_files[f.cv] = place[0]
        return Frame(name, FrameKind.PERL, file=place[0], line=place[1])

    def frames(self, pid: int, key: int) -> tuple[list[list[Frame]], bool]:
        """(leaf-first groups of named Perl frames, one per runloop call; truncated)."""
        raw = self._stacks.get(key)
        entry = self._procs.get(pid)
        if not raw or entry is None:
            return [], False
        groups = [[self._frame(pid, entry, f) for f in group] for group in vm_groups(raw[0])]
        # a sample taken inside pp_entersub can see the new context's type before its CV is set
        # (the slot still holds an older context's fields): an unreadable leaf sub is that, not shown
        if groups and groups[0][0].name == UNKNOWN:
            groups[0] = groups[0][1:]
            if not groups[0]:
                groups = groups[1:]
        self.misses += sum(f.name == UNKNOWN for g in groups for f in g)
        return groups, raw[1]

    def merge(self, pid: int, key: int, native: list[Frame]) -> list[Frame]:
        if not key:
            return native
        groups, truncated = self.frames(pid, key)
        runloops = sum(map(is_runloop, native))
        if native and native[-1].name in ROOT_FRAMES and not truncated and runloops < len(groups):
            # A complete native stack with fewer runloop calls than groups: the leaf-most groups'
            # runloops have returned (a sort comparator's context stays pushed while pp_sort's C
            # code runs between calls): that Perl code is not running, so it is not shown.
            groups = groups[len(groups) - runloops:]
        if not groups:
            return native
        return merge(native, groups, truncated, is_anchor=is_runloop)

    def counters(self) -> list[int]:
        if self._kernel is None:
            return [0] * schema.PERL_STAT_MAX
        return self._kernel.counters()

    def stats(self) -> dict[str, int]:
        """For the agent's debug info and /metrics: processes listed now; since the start, the kernel
        walker's counters (perl_stat) and the subs named or left unknown."""
        t = self._totals.update(self._kernel)
        return {"processes": len(self._procs), "walks": t[schema.PERL_STAT_WALKS],
                "no_interpreter": t[schema.PERL_STAT_NO_INTERP], "truncated": t[schema.PERL_STAT_TRUNCATED],
                "stacks_full": t[schema.PERL_STAT_STACKS_FULL], "subs_read": self.reads, "unknown": self.misses}

    def _entry_process(self, entry: _Process) -> procs.ProcessInfo | None:
        return entry.process


__all__ = ["PerlSource", "parse_stack", "vm_groups"]
