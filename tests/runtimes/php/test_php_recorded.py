"""A PHP process recorded into a directory (procs.record), then ended, and read back with no /proc
and no process_vm_readv: the PHP reader finds the interpreter's executor_globals, and names the
frames of its execute_data chain (walked here as bpf/php.h walks it) from the recording alone."""

from __future__ import annotations

from pathlib import Path

from hotstack import procs
from hotstack.runtimes.php import detect
from hotstack.runtimes.php.source import PhpSource, RawPhpFrame, identity
from tests.peers import require_tool
from tests.procs.recording import detected, no_proc, record_program

WORKLOAD = Path(__file__).resolve().parent / "workload.php"
INTERNAL_FUNCTION = 1      # zend_function.type: 1 internal, 2 user, 4 eval'd code


def _frames(mem: procs.Process, proc: detect.PhpProcess) -> list[RawPhpFrame]:
    """The execute_data chain from executor_globals, innermost first, recorded as the kernel walker
    records it: each frame's function, opline (as an offset in its opcodes), call info, line and
    identity (the hashes of its name and file, its first line)."""
    o = proc.offsets
    out = []
    ed = mem.u64(proc.executor_globals + o.current_execute_data)
    while ed:
        func, opline = mem.u64(ed + o.ed_func), mem.u64(ed)
        name = mem.u64(func + o.fn_name)
        name_h = mem.u64(name + o.str_h) if name else 0
        file_h = line_start = opcodes = 0
        if mem.u8(func + o.fn_type) != INTERNAL_FUNCTION:
            file, line_start = mem.u64(func + o.op_filename), mem.u32(func + o.op_line_start)
            file_h, opcodes = mem.u64(file + o.str_h), mem.u64(func + o.op_opcodes)
        try:
            line = mem.u32(opline + o.op_lineno)
        except procs.MemoryReadError:      # (an internal function's frame: no opline; the walker's read gives 0)
            line = 0
        out.append(RawPhpFrame(func, opline - opcodes, identity(name_h, file_h, line_start),
                               mem.u32(ed + o.ed_call_info), line))
        ed = mem.u64(ed + o.ed_prev)
    return out


def test_php_frames_are_named_from_the_recording_alone(tmp_path, monkeypatch):
    directory, _ready = record_program([require_tool("php"), str(WORKLOAD), "60"], tmp_path / "rec")
    with no_proc(monkeypatch):
        process, proc = detected(directory, detect.detect, "PHP")
        source = PhpSource()
        source._procs[proc.pid] = (proc, None)
        source._stacks[1] = (_frames(process, proc), False)
        named = source.merge(proc.pid, 1, [])
    names = [f.name for f in named][::-1]
    assert names[:3] == ["{main}", "Workload::run", "Workload::step"], names
    user = [f for f in named if "::" in f.name or f.name == "{main}"]
    assert all(Path(f.file) == WORKLOAD and f.line > 0 for f in user), user
