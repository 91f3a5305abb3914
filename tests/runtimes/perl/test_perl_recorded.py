"""A Perl process recorded into a directory (procs.record), then ended, and read back with no /proc
and no process_vm_readv: the Perl reader finds the interpreter and its version, and names the
frames of the main interpreter's context stacks (walked here as bpf/perl.h walks them) from the
recording alone."""

from __future__ import annotations

from pathlib import Path

from hotstack.runtimes.common.files import symbols
from hotstack.runtimes.perl import detect
from hotstack.runtimes.perl.frames import RawContext, frames_of
from hotstack.runtimes.perl.source import PerlSource
from hotstack.symbols.elf import ElfFile
from tests.peers import require_tool
from tests.procs.recording import detected, no_proc, record_program

NESTED = Path(__file__).resolve().parent / "nested.pl"
# root first: a sort comparator under a sub, in an eval, under a sub
CHAIN = ["<main>", "Nested::outer", "(eval)", "Nested::sorter", "Nested::by_value"]


def _contexts(proc: detect.PerlProcess) -> tuple[list[RawContext], int]:
    """(the main interpreter's context entries innermost first, its PL_curcop), as the kernel walker
    records them: the interpreter from PL_curinterp, each runloop's stack after the one it runs in."""
    mem, o, fields = proc.memory, proc.offsets, proc.record_fields
    with ElfFile(proc.binary.path) as elf:
        interp = mem.u64(proc.base + symbols(elf, (b"PL_curinterp",))[b"PL_curinterp"])
    si = mem.u64(interp + fields["curstackinfo"])
    out = []
    while si:
        cxstack = mem.u64(si + o.si_cxstack)
        for ix in range(mem.i32(si + o.si_cxix), -1, -1):
            cx = cxstack + ix * o.cx_size
            out.append(RawContext(mem.u64(cx + o.cx_sub_cv), mem.u64(cx + o.cx_oldcop), mem.u64(cx + o.cx_retop),
                                  mem.u8(cx), 0))
        si = mem.u64(si + o.si_prev)
        if si:
            out.append(RawContext(0, 0, 0, 0, 1))
    return out, mem.u64(interp + fields["curcop"])


def test_perl_frames_are_named_from_the_recording_alone(tmp_path, monkeypatch):
    directory, _ready = record_program([require_tool("perl"), str(NESTED), "60"], tmp_path / "rec")
    with no_proc(monkeypatch):
        process, proc = detected(directory, detect.detect, "Perl")
        assert proc.binary.version[:2] >= (5, 24), proc.binary.version
        contexts, curcop = _contexts(proc)
        source = PerlSource()
        source._procs[proc.pid] = source._entry(proc, None)
        source._stacks[1] = (frames_of(contexts, curcop, False), False)
        groups, _truncated = source.frames(proc.pid, 1)
    frames = [f for group in groups for f in group][::-1]
    names = [f.name for f in frames]
    assert len(names) >= 2 and names == CHAIN[:len(names)], names
    assert all(f.resolved and Path(f.file) == NESTED for f in frames), frames
