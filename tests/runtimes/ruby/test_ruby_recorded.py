"""A Ruby process recorded into a directory (procs.record), then ended, and read back with no /proc
and no process_vm_readv: the Ruby reader finds the interpreter and its version, and names the
frames of the main thread's VM stack (walked here as bpf/ruby.h walks it) from the recording alone."""

from __future__ import annotations

import json

from hotstack.runtimes.common.files import symbols
from hotstack.runtimes.ruby import detect
from hotstack.runtimes.ruby.frames import RawRubyFrame
from hotstack.runtimes.ruby.source import RubySource
from hotstack.symbols.elf import ElfFile
from tests.peers import require_tool
from tests.procs.recording import detected, no_proc, record_program

from rb_helpers import WORKLOAD


def _main_thread_frames(proc: detect.RubyProcess) -> list[RawRubyFrame]:
    """The main thread's control frames, leaf first, as the kernel walker records them: its
    execution context is the main ractor's running one (ruby_single_main_ractor, Ruby 3.x)."""
    mem, o = proc.memory, proc.offsets
    with ElfFile(proc.binary.path) as elf:
        ractor = mem.u64(proc.base + symbols(elf, (b"ruby_single_main_ractor",))[b"ruby_single_main_ractor"])
    ec = mem.u64(ractor + o.running_ec)
    vm_stack, size, cfp = mem.u64(ec + o.ec_vm_stack), mem.u64(ec + o.ec_vm_stack_size), mem.u64(ec + o.ec_cfp)
    out = []
    while cfp < vm_stack + size * 8 - o.cf_size:
        pc, _sp, iseq, _self, ep = (mem.u64(cfp + 8 * i) for i in range(5))
        me, flags = (mem.u64(ep - 16), mem.u32(ep)) if ep else (0, 0)
        out.append(RawRubyFrame(iseq, pc, me, flags))
        cfp += o.cf_size
    return out


def test_ruby_frames_are_named_from_the_recording_alone(tmp_path, monkeypatch):
    directory, ready = record_program([require_tool("ruby"), str(WORKLOAD), "60"], tmp_path / "rec")
    with no_proc(monkeypatch):
        process, proc = detected(directory, detect.detect, "Ruby")
        assert ".".join(map(str, proc.version)) == json.loads(ready)["version"]
        source = RubySource()
        source._procs[proc.pid] = source._entry(proc, None)
        source._stacks[1] = (_main_thread_frames(proc), False)
        groups, _truncated = source.frames(proc.pid, 1)
    names = [f.name for group in groups for f in group]
    # (leaf first: its burn loop, or the step loop of run between two steps)
    assert names[-2:] == ["Workload#run", "<main>"] and len(names) >= 3, names
    assert all(f.resolved for group in groups for f in group), names
    assert {f.file for group in groups for f in group if f.name.startswith("Workload#")} == {str(WORKLOAD)}
