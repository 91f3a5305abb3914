"""Unwind rows for x86-64 code that no CFI describes, worked out from the machine code.

musl's libc (Debian's and Alpine's builds) is compiled without unwind tables and without frame
pointers: its .eh_frame describes a handful of functions, its assembly (memcpy, __clone,
__restore_rt) none. A walk through it had nothing to step with. Here each function of such code,
from its entry (a function symbol, the target of a direct call, or an address the code loads
with `lea reg, [rip + x]`: a callback, a thread's start), is followed instruction by instruction
along its branches (capstone decodes it), tracking the stack pointer's distance from the CFA:
push/pop, add/sub/lea of RSP by a constant, a frame pointer set up by `push rbp; mov rbp, rsp`
(then CFA = RBP + 16 wherever RSP moves by an unknown amount), `leave`. Each instruction gets the
rule of its state; an instruction two paths reach in different states, one after an RSP change
that cannot be followed, or code no path reached (a switch's jump-table targets) gets the
UNKNOWN rule: the walk ends there, truncated, rather than guess a caller. A switch's cases are
found from its table where gcc's code reads it (Analysis._switch_targets).

Two assembly routines are recognised by their code: the signal return trampoline (`mov rax, 15;
syscall`: musl's __restore_rt, the registers of the interrupted code are in the rt_sigframe at
RSP) and a thread's root (a `call` followed by the exit syscall: musl's __clone, which calls the
thread's start function on the new stack and exits when it returns).

Only gaps between CFI rows that hold an entry are analysed; the ELF entry point's code is left
UNKNOWN, for kernel_tables._entry_stops to make it the process's root. Files with CFI for all their functions
(glibc's, most distributions' libraries) keep their rows as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..bpf import schema
from ..symbols.elf import ElfFile
from ..symbols.known_code import SIGRETURN
from . import cfi

KIND_UNKNOWN = schema.NU_KIND_UNKNOWN
PF_X = 1
MAX_CODE_BYTES = 64 << 20          # larger executable segments are left to their CFI
# code without CFI analysed at most per file (~1.5 s a MiB here; musl's libc is 0.4 MiB): a larger
# file without CFI keeps the frame-pointer walk
MAX_GAP_BYTES = 8 << 20
_RIP_LEA = re.compile(r"^(\w+), \[rip ([+-]) (0x[0-9a-f]+|\d+)\]$")
_RSP_DISP = re.compile(r"^\[rsp(?: ([+-]) (0x[0-9a-f]+|\d+))?\]$")
_RBP_DISP = re.compile(r"^\[rbp(?: ([+-]) (0x[0-9a-f]+|\d+))?\]$")
_ENDS = frozenset(("ret", "hlt", "ud2", "int3", "jmp"))
_NO_WRITE = frozenset(("cmp", "test", "push", "bt"))
_REGISTERS = frozenset(("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11", "r12", "r13",
                        "r14", "r15"))
# Functions that do not return: a call of one ends its path (the code after it is another function's)
NORETURN = frozenset(("abort", "exit", "_exit", "_Exit", "quick_exit", "__stack_chk_fail", "__libc_fatal",
                      "__assert_fail", "__assert_perror_fail", "__fortify_fail", "__chk_fail", "pthread_exit",
                      "__pthread_exit", "longjmp", "_longjmp", "siglongjmp", "__longjmp_chk", "__cxa_throw",
                      "__cxa_rethrow", "_Unwind_Resume", "err", "errx", "verr", "verrx", "__unmapself",
                      "__libc_longjmp", "__libc_siglongjmp"))
TOP = "top"                        # two paths disagree, or an RSP change not followed
# The C runtime's start-up and tear-down stubs (crti/crtn, crtbegin/crtend) that gcc links into
# every program and library without CFI. They run once, at load and exit, and are no reason to
# analyse a file: alone, they would decode code (and load capstone, ~10 MB of the profiler's
# memory for the rest of its run) for every unstripped library built with glibc.
# A file is analysed only where most of its functions lie outside its CFI: a file built without
# unwind tables (musl's libc). A file whose CFI describes most of its functions keeps the
# frame-pointer walk in its gaps: node's embedded builtins (2,209 of 78,125 functions, 2.6 MB of
# code a JIT's frames pass through) and libjvm's stubs follow conventions the analysis does not
# know, and would cost seconds a file.
MIN_SHARE_IN_GAPS = 0.5
_C_RUNTIME_STUBS = frozenset(("_init", "_fini", "deregister_tm_clones", "register_tm_clones",
                              "__do_global_dtors_aux", "frame_dummy"))


@dataclass(frozen=True)
class State:
    """At an instruction: CFA - RSP (None: not known), whether RBP holds CFA - 16 (a frame
    pointer), and where the caller's RBP is saved (an offset from the CFA; None: still in RBP)."""
    height: int | None
    frame_pointer: bool = False
    rbp_saved: int | None = None


ENTRY = State(8)


def _num(sign: str | None, text: str | None) -> int:
    if text is None:
        return 0
    value = int(text, 0)
    return -value if sign == "-" else value


class Code:
    """The executable bytes of a file's load segments, decoded on demand (one instruction a call,
    cached)."""

    def __init__(self, elf: ElfFile) -> None:
        import capstone

        self.md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self.md.skipdata = False
        # views of the mapped file, not copies: a library's text is megabytes, of which a few
        # stretches without CFI are read
        self.segments = [(lo, hi, elf.view(offset, hi - lo)) for lo, hi, offset in code_segments(elf)]
        self._cache: dict[int, tuple | None] = {}
        self.elf = elf

    def read(self, vaddr: int, size: int) -> bytes:
        """Bytes of the file at a virtual address (b"" where none)."""
        offset = self.elf.vaddr_to_file_offset(vaddr)
        if offset is None or offset + size > self.elf.size:
            return b""
        return self.elf.read(offset, size)

    def contains(self, addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi, _ in self.segments)

    def at(self, addr: int) -> tuple | None:
        """(address, size, mnemonic, operands) of the instruction at addr, None if none decodes."""
        if addr in self._cache:
            return self._cache[addr]
        insn = None
        for lo, hi, data in self.segments:
            if lo <= addr < hi:
                insn = next(self.md.disasm_lite(bytes(data[addr - lo:addr - lo + 16]), addr, 1), None)
                break
        self._cache[addr] = insn
        return insn

    def sweep(self, lo: int, hi: int):
        """The instructions of [lo, hi) decoded in a row (past an undecodable byte, from the next)."""
        addr = lo
        while addr < hi:
            insn = self.at(addr)
            if insn is None:
                addr += 1
                continue
            yield insn
            addr += insn[1]


def _branch_target(ops: str) -> int | None:
    try:
        return int(ops, 0)
    except ValueError:
        return None


def _step(state: State, mnemonic: str, ops: str) -> State | str:
    """The state after one instruction that falls through (TOP when RSP moves in a way not
    followed)."""
    h, fp, saved = state.height, state.frame_pointer, state.rbp_saved
    first, _, second = ops.partition(", ")
    if mnemonic in ("push", "pushfq"):
        if mnemonic == "push" and first == "rbp" and h is not None and saved is None:
            saved = -(h + 8)
        return State(None if h is None else h + 8, fp, saved)
    if mnemonic in ("pop", "popfq"):
        if first == "rbp":
            if h is not None and saved == -h:
                saved, fp = None, False
            else:
                return TOP
        return State(None if h is None else h - 8, fp, saved)
    if mnemonic == "leave":
        if not fp:
            return TOP
        return State(8, False, None)
    if first == "rsp" and mnemonic not in _NO_WRITE:
        return _rsp_write(state, mnemonic, second)
    if first in ("rbp", "ebp", "bp", "bpl") and mnemonic not in _NO_WRITE:
        if mnemonic == "mov" and second == "rsp" and h is not None and saved == -16 and h == 16:
            return State(h, True, saved)
        # RBP used as a register of its own (its caller's value saved, as the ABI has it)
        return State(h, False, saved) if h is not None else TOP
    if mnemonic == "mov" and second == "rbp" and h is not None and saved is None:
        m = _RSP_DISP.match(first)
        if m:
            return State(h, fp, _num(m.group(1), m.group(2)) - h)
    return state


def _rsp_write(state: State, mnemonic: str, source: str) -> State | str:
    h, fp, saved = state.height, state.frame_pointer, state.rbp_saved
    if mnemonic in ("sub", "add") and h is not None:
        try:
            value = int(source, 0)
        except ValueError:
            return State(None, fp, saved) if fp else TOP
        return State(h + value if mnemonic == "sub" else h - value, fp, saved)
    if mnemonic == "lea":
        m = _RSP_DISP.match(source)
        if m and h is not None:
            return State(h - _num(m.group(1), m.group(2)), fp, saved)
        m = _RBP_DISP.match(source)
        if m and fp:
            return State(16 - _num(m.group(1), m.group(2)), fp, saved)
    if mnemonic == "mov" and source == "rbp" and fp:
        return State(16, fp, saved)
    # (and rsp, -16; mov rsp, reg; sub rsp, reg: CFA = RBP + 16 where RBP is a frame pointer)
    return State(None, fp, saved) if fp else TOP


def _join(a: State | str, b: State | str) -> State | str:
    """Two paths' states at one instruction: where both keep the frame pointer (with the caller's
    RBP at the same place), CFA = RBP + 16 holds whatever RSP is (a VLA's frame); else TOP."""
    if isinstance(a, State) and isinstance(b, State) and a.frame_pointer and b.frame_pointer \
            and a.rbp_saved == b.rbp_saved:
        return State(None, True, a.rbp_saved)
    return TOP


class Analysis:
    """The states of every instruction reached from the entries, by a worklist over the branches."""

    def __init__(self, code: Code, entries: set[int], inside, noreturn: frozenset[int] = frozenset()) -> None:
        self.code, self.entries, self.inside, self.noreturn = code, entries, inside, noreturn
        self.states: dict[int, State | str] = {}
        self.sizes: dict[int, int] = {}
        self.signal: set[int] = set()
        self.thread_roots: list[tuple[int, int]] = []
        work = [(e, ENTRY) for e in sorted(entries)]
        while work:
            addr, state = work.pop()
            work.extend(self._visit(addr, state))

    def _merge(self, addr: int, state: State | str) -> bool:
        """Record state at addr; whether it changed (and so must be followed on)."""
        old = self.states.get(addr)
        if old == state or old == TOP:
            return False
        self.states[addr] = state if old is None else _join(old, state)
        return self.states[addr] != old

    def _visit(self, addr: int, state: State | str) -> list:
        out = []
        start = addr
        recent: list[tuple] = []
        # (an entry is reached by fall-through only past a call that does not return: not a path)
        while self.inside(addr) and (addr == start or addr not in self.entries) and self._merge(addr, state):
            insn = self.code.at(addr)
            if insn is None:
                self.states[addr] = TOP
                return out
            _, size, mnemonic, ops = insn
            self.sizes[addr] = size
            state = self.states[addr]
            nxt = addr + size
            if mnemonic == "mov" and ops == "rax, 0xf" and self._is_sigreturn(addr):
                self.signal.add(addr)
                return out
            if mnemonic == "call":
                self._note_thread_root(addr, nxt)
            recent = (recent + [insn])[-6:]
            if mnemonic == "jmp" and state != TOP and ops in _REGISTERS:
                out.extend((t, state) for t in self._switch_targets(recent))
            if mnemonic.startswith("j"):
                target = _branch_target(ops)
                if target is not None and target not in self.entries and self.inside(target):
                    out.append((target, state))
                if mnemonic == "jmp":
                    return out
            elif mnemonic in _ENDS:
                return out
            if mnemonic == "call" and _branch_target(ops) in self.noreturn:
                # a call that does not return (abort, __libc_fatal): what follows is another
                # function's code (or padding), which no path reaches with this frame
                return out
            if state != TOP:
                state = _step(state, mnemonic, ops) if mnemonic != "call" else state
            addr = nxt
        return out

    def _switch_targets(self, recent: list[tuple]) -> list[int]:
        """The cases of a switch compiled to a table of 32-bit offsets from its own address, as gcc
        makes it: `cmp i, n; ja default; lea b, [rip + table]; movsxd r, dword ptr [b + i*4];
        add r, b; jmp r`, the table's n + 1 entries read from the file. Each case has the jump's
        state. Nothing for any other indirect jump (its targets are not known: UNKNOWN)."""
        if len(recent) < 5:
            return []
        cmp, ja, lea, load, add, jump = ([None] * 6 + recent)[-6:]
        reg = jump[3]
        m = _RIP_LEA.match(lea[3]) if lea and lea[2] == "lea" else None
        if not (m and ja and ja[2] == "ja" and cmp and cmp[2] == "cmp" and add[2] == "add"
                and add[3] == f"{reg}, {m.group(1)}" and load[2] == "movsxd"
                and load[3].startswith(f"{reg}, dword ptr [{m.group(1)} + ") and load[3].endswith("*4]")):
            return []
        try:
            count = int(cmp[3].rpartition(", ")[2], 0) + 1
        except ValueError:
            return []
        table = lea[0] + lea[1] + _num(m.group(2), m.group(3))
        data = self.code.read(table, 4 * count) if 0 < count <= 4096 else b""
        if len(data) != 4 * count:
            return []
        targets = [table + v for v in np.frombuffer(data, "<i4").tolist()]
        return targets if all(self.inside(t) for t in targets) else []

    def _is_sigreturn(self, addr: int) -> bool:
        for lo, hi, data in self.code.segments:
            if lo <= addr < hi:
                return bytes(data[addr - lo:addr - lo + len(SIGRETURN)]) == SIGRETURN
        return False

    def _note_thread_root(self, call: int, after: int) -> None:
        """A call followed by the exit syscall (`mov edi, eax; xor eax, eax; mov al, 60; syscall`):
        the return address is a thread's root."""
        addr, exit_number = after, False
        for _ in range(4):
            insn = self.code.at(addr)
            if insn is None:
                return
            _, size, mnemonic, ops = insn
            if mnemonic == "mov" and ops in ("al, 0x3c", "eax, 0x3c", "al, 0xe7", "eax, 0xe7"):
                exit_number = True
            elif mnemonic == "syscall":
                if exit_number:
                    self.thread_roots.append((call, addr + size))
                return
            addr += size


def code_segments(elf: ElfFile) -> list[tuple[int, int, int]]:
    """(start, end, file offset) of the file's executable load segments (of at most MAX_CODE_BYTES)."""
    return [(seg.vaddr, seg.vaddr + seg.filesz, seg.offset) for seg in elf.segments
            if seg.flags & PF_X and 0 < seg.filesz <= MAX_CODE_BYTES]


def _gaps(pcs: np.ndarray, kinds: np.ndarray, segments: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The stretches of executable code that no CFI row describes (an INVALID row, or before the
    first row), in one pass over the rows (a library has hundreds of thousands)."""
    pcs = pcs.astype(np.uint64, copy=False)
    invalid = kinds == cfi.KIND_INVALID
    gaps = []
    for lo, hi, _offset in segments:
        first = int(np.searchsorted(pcs, np.uint64(lo), side="right"))
        last = int(np.searchsorted(pcs, np.uint64(hi), side="left"))
        inside, bad = pcs[first:last], invalid[first:last]
        # the state at lo: the row before it (none: not described)
        before_bad = first == 0 or bool(invalid[first - 1])
        # a gap opens at a row that is INVALID after a described row (or at lo) and closes at the
        # next described row
        prev_bad = np.concatenate(([before_bad], bad[:-1]))
        opens = np.flatnonzero(bad & ~prev_bad)
        closes = np.flatnonzero(~bad & prev_bad)
        starts = [lo] if before_bad else []
        starts += inside[opens].tolist()
        ends = inside[closes].tolist()
        if len(ends) < len(starts):
            ends.append(hi)
        gaps += [(a, b) for a, b in zip(starts, ends) if b > a]
    return gaps


def _referenced(code: Code, gaps: list[tuple[int, int]], held: list[int], gap_of, in_gap) -> set[int]:
    """The targets of the direct calls and RIP-relative `lea`s that land in a gap, in the code of the
    gaps `held` (those with a function symbol) and of the gaps their targets lie in, and so on: only
    code an entry can lead to is decoded (a large library's gaps are megabytes of it)."""
    found = set()
    todo, swept = list(held), set(held)
    while todo:
        lo, hi = gaps[todo.pop()]
        for addr, size, mnemonic, ops in code.sweep(lo, hi):
            if mnemonic == "call":
                target = _branch_target(ops)
            elif mnemonic == "lea":
                m = _RIP_LEA.match(ops)
                target = addr + size + _num(m.group(2), m.group(3)) if m else None
            else:
                continue
            if target is not None and in_gap(target):
                found.add(target)
                i = gap_of(target)
                if i not in swept:
                    swept.add(i)
                    todo.append(i)
    return found


def code_rows(elf: ElfFile, pcs: np.ndarray, kinds: np.ndarray) -> tuple[list[int], list[tuple]]:
    """(pcs, rules as (kind, cfa, rbp, ra)) of the code in the CFI's gaps that holds an entry; every
    analysed gap ends in an INVALID row. Nothing for a file that is not x86-64 or whose code is
    all described. A file whose gaps hold no function symbol (most libraries with CFI: their gaps
    are padding and the odd stub) costs a search of its symbols and nothing is decoded."""
    if elf.machine != cfi.EM_X86_64:
        return [], []
    gaps = _gaps(pcs, kinds, code_segments(elf))
    if not gaps or sum(hi - lo for lo, hi in gaps) > MAX_GAP_BYTES:
        return [], []
    starts = np.array([g[0] for g in gaps], np.uint64)
    ends = np.array([g[1] for g in gaps], np.uint64)

    def gap_of(addr: int) -> int:
        i = int(np.searchsorted(starts, np.uint64(addr), side="right")) - 1
        return i if i >= 0 and addr < gaps[i][1] else -1

    def in_gap(addr: int) -> bool:
        # (the entry point's code is the process's root: kernel_tables._entry_stops)
        return gap_of(addr) >= 0 and addr != elf.entry

    symbols, _sizes, names, tables, strtabs = elf.function_symbols()
    at = np.searchsorted(starts, symbols, side="right").astype(np.int64) - 1
    inside = (at >= 0) & (symbols < ends[np.maximum(at, 0)]) & (symbols != np.uint64(elf.entry))
    for i in np.flatnonzero(inside).tolist():
        inside[i] = elf.symbol_name(strtabs[tables[i]], names[i]) not in _C_RUNTIME_STUBS
    entries = set(symbols[inside].tolist())
    if not entries or len(entries) < MIN_SHARE_IN_GAPS * len(symbols):
        return [], []
    code = Code(elf)
    entries |= _referenced(code, gaps, sorted(set(at[inside].tolist())), gap_of, in_gap)
    analysis = Analysis(code, entries, in_gap, _noreturn(elf))
    analysed = sorted({gap_of(a) for a in entries})
    return _rows(analysis, [gaps[i] for i in analysed])


def _noreturn(elf: ElfFile) -> frozenset[int]:
    """The addresses of the NORETURN functions and of their PLT stubs."""
    out = {elf.symbol_value(name) for name in NORETURN} - {None, 0}     # (found by name in the string tables)
    out.update(addr for addr, _size, name in elf.plt_symbols() if name.partition("@")[0] in NORETURN)
    return frozenset(out)


def _rule(state: State | str | None) -> tuple:
    """The kernel's rule (kind, cfa, rbp, ra: struct nu_rule) for an instruction's state."""
    if isinstance(state, State):
        if state.height is not None and 8 <= state.height < 1 << 31:
            rbp = schema.NU_RBP_SAME if state.rbp_saved is None else state.rbp_saved
            if rbp == schema.NU_RBP_SAME or -32767 <= rbp < 0:
                return (cfi.KIND_CFA_SP, state.height, rbp, -8)
            return (KIND_UNKNOWN, 0, 0, 0)
        if state.frame_pointer:
            return (cfi.KIND_CFA_FP, 16, -16, -8)
    return (KIND_UNKNOWN, 0, 0, 0)


def _rows(analysis: Analysis, gaps: list[tuple[int, int]]) -> tuple[list[int], list[tuple]]:
    """A row where the rule changes, an UNKNOWN row where no path reached, an INVALID row at
    each gap's end."""
    rule_at = {addr: (_rule(state), analysis.sizes.get(addr, 1)) for addr, state in analysis.states.items()}
    for addr in analysis.signal:
        # a return address into the trampoline is looked up at its address - 1: the nop that glibc
        # and musl put before it
        if addr - 1 not in rule_at or analysis.code.at(addr - 1)[2:] == ("nop", ""):
            rule_at[addr - 1] = ((cfi.KIND_SIGNAL, 0, 0, 0), 1)
        rule_at[addr] = ((cfi.KIND_SIGNAL, 0, 0, 0), len(SIGRETURN))
    for call, end in analysis.thread_roots:
        for addr in [a for a in rule_at if call <= a < end]:
            rule_at[addr] = ((cfi.KIND_STOP, 0, 0, 0), rule_at[addr][1])
    addrs = np.array(sorted(rule_at), np.int64)
    pcs: list[int] = []
    rules: list[tuple] = []

    def put(pc: int, rule: tuple) -> None:
        if not rules or rules[-1] != rule:
            pcs.append(pc)
            rules.append(rule)

    for lo, hi in gaps:
        at = lo
        for addr in addrs[(addrs >= lo) & (addrs < hi)].tolist():
            if addr > at:
                put(at, (KIND_UNKNOWN, 0, 0, 0))
            rule, size = rule_at[addr]
            put(addr, rule)
            at = max(at, addr + size)
        if at < hi:
            put(at, (KIND_UNKNOWN, 0, 0, 0))
        pcs.append(hi)
        rules.append((cfi.KIND_INVALID, 0, 0, 0))
    return pcs, rules
