"""Call frame information (.eh_frame, .debug_frame) -> unwind rows.

A hand-written parser: pyelftools is 17x slower on libpython and raises on Debian's libc (an
opcode path it does not know). It evaluates only what an unwinder needs on x86-64 and arm64:
- where the CFA is (the stack or frame pointer + offset, or x86's PLT expression);
- where the return address and the caller's frame pointer (RBP, x29) are saved;
- whether the return address is undefined (the outermost frame: `_start`, `clone3`, thread
  start) or still in its register (arm64's link register x30, before a prologue saves it);
- whether the function is a signal trampoline (augmentation 'S').
The registers are the ELF's machine's (`Arch`, from e_machine); the row fields keep x86's names (rbp: the frame pointer).

Rows are emitted as (pc, kind, cfa_offset, rbp_offset, ra_offset) with `pc` an
ELF virtual address; a row holds from its pc up to the next row's pc.
"""

from __future__ import annotations

import struct

from ..bpf import schema

# Row kinds (also the table's `kind` column): the kernel unwinder's numbers (struct nu_rule.kind),
# so that a rule reaches it as is.
KIND_INVALID = schema.NU_KIND_INVALID   # no rule we can evaluate: fall back to frame pointers
KIND_CFA_SP = schema.NU_KIND_CFA_SP     # CFA = RSP + cfa_offset
KIND_CFA_FP = schema.NU_KIND_CFA_FP     # CFA = RBP + cfa_offset
KIND_PLT = schema.NU_KIND_PLT           # CFA = RSP + cfa_offset + ((RIP & 15) >= rbp_offset) * 8  (PLT stubs)
KIND_STOP = schema.NU_KIND_STOP         # return address undefined: outermost frame
KIND_SIGNAL = schema.NU_KIND_SIGNAL     # signal trampoline: registers are in the rt_sigframe at RSP
KIND_END = 6         # parser-internal: the end of an FDE (INVALID unless another FDE starts there)
KIND_NAMES = ("invalid", "cfa=sp", "cfa=fp", "plt", "stop", "signal")

RBP_SAME = 0x7FFFFFFF   # rbp_offset when the caller's RBP is still in RBP
RA_SAME = 0x7FFFFFFF    # ra_offset when the return address is still in the link register (arm64)

# DWARF register numbers, x86-64 (System V psABI).
REG_RBP, REG_RSP, REG_RA = 6, 7, 16

EM_X86_64, EM_AARCH64 = 62, 183


class Arch:
    """An architecture's DWARF register numbers and the return-address rule at a function's entry
    (x86-64: at CFA - 8, pushed by the call; arm64: in x30, the link register)."""

    __slots__ = ("name", "fp", "sp", "ra", "ra_at_entry", "cfa_at_entry")

    def __init__(self, name: str, fp: int, sp: int, ra: int, ra_at_entry: int, cfa_at_entry: int) -> None:
        self.name, self.fp, self.sp, self.ra = name, fp, sp, ra
        self.ra_at_entry, self.cfa_at_entry = ra_at_entry, cfa_at_entry

    def __repr__(self) -> str:
        return f"Arch({self.name})"


X86_64 = Arch("x86_64", REG_RBP, REG_RSP, REG_RA, -8, 8)
AARCH64 = Arch("aarch64", 29, 31, 30, RA_SAME, 0)      # x29 (fp), sp, x30 (lr); AAPCS64 DWARF
ARCHES = {EM_X86_64: X86_64, EM_AARCH64: AARCH64}


def arch_of(machine: int) -> Arch | None:
    """The Arch of an ELF's e_machine; None for a machine we have no rules for."""
    return ARCHES.get(machine)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class CfiError(ValueError):
    pass


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _sleb(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                result -= 1 << shift
            return result, pos


def _encoded(data: bytes, pos: int, enc: int, section_addr: int) -> tuple[int, int]:
    """A DW_EH_PE-encoded pointer at data[pos]."""
    if enc == 0xFF:
        return 0, pos
    fmt = enc & 0x0F
    start = pos
    if fmt == 0x00 or fmt == 0x04:
        value, pos = _U64.unpack_from(data, pos)[0], pos + 8
    elif fmt == 0x03:
        value, pos = _U32.unpack_from(data, pos)[0], pos + 4
    elif fmt == 0x0B:
        value, pos = struct.unpack_from("<i", data, pos)[0], pos + 4
    elif fmt == 0x02:
        value, pos = struct.unpack_from("<H", data, pos)[0], pos + 2
    elif fmt == 0x0A:
        value, pos = struct.unpack_from("<h", data, pos)[0], pos + 2
    elif fmt == 0x0C:
        value, pos = struct.unpack_from("<q", data, pos)[0], pos + 8
    elif fmt == 0x01:
        value, pos = _uleb(data, pos)
    elif fmt == 0x09:
        value, pos = _sleb(data, pos)
    else:
        raise CfiError(f"pointer encoding {enc:#x}")
    if enc & 0x70 == 0x10:          # pcrel
        value += section_addr + start
    return value & 0xFFFFFFFFFFFFFFFF, pos


class _Cie:
    __slots__ = ("code_align", "data_align", "ra_reg", "fde_enc", "has_aug_data", "signal", "initial",
                 "lsda_enc", "arch")

    def __init__(self, arch: Arch = X86_64) -> None:
        self.arch = arch
        self.code_align, self.data_align, self.ra_reg = 1, -8, arch.ra
        self.fde_enc, self.has_aug_data, self.signal, self.initial, self.lsda_enc = 0, False, False, b"", 0xFF


def _parse_cie(data: bytes, pos: int, end: int, section_addr: int, debug_frame: bool,
               arch: Arch = X86_64) -> _Cie:
    cie = _Cie(arch)
    version = data[pos]
    pos += 1
    aug_end = data.index(b"\0", pos)
    aug = data[pos:aug_end].decode("ascii", "replace")
    pos = aug_end + 1
    if "eh" in aug:
        pos += 8
    if debug_frame and version >= 4:
        pos += 2            # address_size, segment_selector_size
    cie.code_align, pos = _uleb(data, pos)
    cie.data_align, pos = _sleb(data, pos)
    if version == 1:
        cie.ra_reg, pos = data[pos], pos + 1
    else:
        cie.ra_reg, pos = _uleb(data, pos)
    if not debug_frame:
        cie.fde_enc = 0x00
    if aug.startswith("z"):
        length, pos = _uleb(data, pos)
        after = pos + length
        cie.has_aug_data = True
        for ch in aug[1:]:
            if ch == "R":
                cie.fde_enc, pos = data[pos], pos + 1
            elif ch == "P":
                enc = data[pos]
                _, pos = _encoded(data, pos + 1, enc & 0x7F, section_addr)
            elif ch == "L":
                cie.lsda_enc, pos = data[pos], pos + 1
            elif ch == "S":
                cie.signal = True
            # 'B' (arm64 BTI), 'G' (MTE): no data
        pos = after
    elif "S" in aug:
        cie.signal = True
    cie.initial = data[pos:end]
    return cie


def _plt_threshold(expr: bytes) -> tuple[int, int] | None:
    """(rsp offset, threshold) if `expr` is the x86-64 PLT CFA expression, else None.

    The linkers emit: breg7(rsp) N; breg16(rip) 0; lit15; and; litK; ge; lit3; shl; plus,
    i.e. CFA = RSP + N + ((RIP & 15) >= K) * 8.
    """
    if len(expr) < 10 or expr[0] != 0x77:
        return None
    off, pos = _sleb(expr, 1)
    tail = expr[pos:]
    if len(tail) == 9 and tail[0] == 0x80 and tail[1] == 0 and tail[2] == 0x3F and tail[3] == 0x1A \
            and 0x30 <= tail[4] <= 0x4F and tail[5:] == b"\x2a\x33\x24\x22":
        return off, tail[4] - 0x30
    return None


class _State:
    __slots__ = ("kind", "cfa_reg", "cfa_off", "rbp_off", "ra_off", "plt_k", "arch")

    def __init__(self, arch: Arch = X86_64) -> None:
        self.arch = arch
        self.kind, self.cfa_reg, self.cfa_off = KIND_CFA_SP, arch.sp, arch.cfa_at_entry
        self.rbp_off, self.ra_off, self.plt_k = RBP_SAME, arch.ra_at_entry, 0

    def copy(self) -> "_State":
        s = _State.__new__(_State)
        s.kind, s.cfa_reg, s.cfa_off, s.rbp_off, s.ra_off, s.plt_k, s.arch = \
            self.kind, self.cfa_reg, self.cfa_off, self.rbp_off, self.ra_off, self.plt_k, self.arch
        return s

    def row(self, pc: int) -> tuple[int, int, int, int, int]:
        if self.ra_off is None:
            return (pc, KIND_STOP, 0, 0, 0)
        if self.kind == KIND_PLT:
            return (pc, KIND_PLT, self.cfa_off, self.plt_k, self.ra_off)
        if self.kind != KIND_INVALID:
            if self.cfa_reg == self.arch.sp:
                return (pc, KIND_CFA_SP, self.cfa_off, self.rbp_off, self.ra_off)
            if self.cfa_reg == self.arch.fp:
                return (pc, KIND_CFA_FP, self.cfa_off, self.rbp_off, self.ra_off)
        return (pc, KIND_INVALID, 0, 0, 0)


def _execute(ins: bytes, state: _State, initial: _State | None, cie: _Cie, loc: int,
             rows: list | None) -> int:
    """Run CFA instructions; append a row at each location change. Returns the final location."""
    stack: list[_State] = []
    pos, n = 0, len(ins)
    ca, da = cie.code_align, cie.data_align
    while pos < n:
        op = ins[pos]
        pos += 1
        high, low = op & 0xC0, op & 0x3F
        if high == 0x40 or op in (0x02, 0x03, 0x04, 0x01):     # advance_loc*, set_loc
            if high == 0x40:
                new = loc + low * ca
            elif op == 0x02:
                new, pos = loc + ins[pos] * ca, pos + 1
            elif op == 0x03:
                new, pos = loc + struct.unpack_from("<H", ins, pos)[0] * ca, pos + 2
            elif op == 0x04:
                new, pos = loc + _U32.unpack_from(ins, pos)[0] * ca, pos + 4
            else:
                new, pos = _U64.unpack_from(ins, pos)[0], pos + 8
            if rows is not None:
                rows.append(state.row(loc))
            loc = new
            continue
        if high == 0x80:                                      # offset(reg) = uleb * data_align
            off, pos = _uleb(ins, pos)
            _set_saved(state, cie, low, off * da)
        elif high == 0xC0:                                    # restore(reg)
            _restore(state, initial, cie, low)
        elif op == 0x00:
            pass
        elif op == 0x0A:                                      # remember_state
            stack.append(state.copy())
        elif op == 0x0B:                                      # restore_state
            if stack:
                saved = stack.pop()
                state.kind, state.cfa_reg, state.cfa_off, state.rbp_off, state.ra_off, state.plt_k = \
                    saved.kind, saved.cfa_reg, saved.cfa_off, saved.rbp_off, saved.ra_off, saved.plt_k
        elif op == 0x0C:                                      # def_cfa
            reg, pos = _uleb(ins, pos)
            off, pos = _uleb(ins, pos)
            state.cfa_reg, state.cfa_off, state.kind = reg, off, KIND_CFA_SP
        elif op == 0x0D:                                      # def_cfa_register
            state.cfa_reg, pos = _uleb(ins, pos)
            if state.kind not in (KIND_CFA_SP, KIND_CFA_FP):
                state.kind = KIND_CFA_SP
        elif op == 0x0E:                                      # def_cfa_offset
            state.cfa_off, pos = _uleb(ins, pos)
        else:
            pos = _execute_rare(op, ins, pos, state, initial, cie)
    return loc


def _execute_rare(op: int, ins: bytes, pos: int, state: _State, initial: _State | None, cie: _Cie) -> int:
    """The CFA instructions compilers emit seldom (the common ones are _execute's own): run one,
    return the position after it."""
    da, fp_reg, arm64 = cie.data_align, cie.arch.fp, cie.arch is AARCH64
    if op in (0x05, 0x11, 0x2F):                              # offset_extended(_sf), GNU_negative
        reg, pos = _uleb(ins, pos)
        if op == 0x11:
            off, pos = _sleb(ins, pos)
            _set_saved(state, cie, reg, off * da)
        else:
            off, pos = _uleb(ins, pos)
            _set_saved(state, cie, reg, (-off if op == 0x2F else off) * da)
    elif op == 0x06:                                          # restore_extended
        reg, pos = _uleb(ins, pos)
        _restore(state, initial, cie, reg)
    elif op == 0x07:                                          # undefined
        reg, pos = _uleb(ins, pos)
        if reg == cie.ra_reg:
            state.ra_off = None
        elif reg == fp_reg:
            state.rbp_off = RBP_SAME
    elif op == 0x08:                                          # same_value
        reg, pos = _uleb(ins, pos)
        if reg == fp_reg:
            state.rbp_off = RBP_SAME
        elif reg == cie.ra_reg and arm64:
            state.ra_off = RA_SAME
    elif op == 0x09:                                          # register(reg, reg2)
        reg, pos = _uleb(ins, pos)
        _, pos = _uleb(ins, pos)
        if reg == cie.ra_reg:
            state.kind = KIND_INVALID
    elif op == 0x2D and arm64:
        pass       # AARCH64_negate_ra_state: return addresses signed (PAC); the unwinder strips it
    elif op == 0x12:                                          # def_cfa_sf
        reg, pos = _uleb(ins, pos)
        off, pos = _sleb(ins, pos)
        state.cfa_reg, state.cfa_off, state.kind = reg, off * da, KIND_CFA_SP
    elif op == 0x13:                                          # def_cfa_offset_sf
        off, pos = _sleb(ins, pos)
        state.cfa_off = off * da
    elif op == 0x0F:                                          # def_cfa_expression
        length, pos = _uleb(ins, pos)
        plt = _plt_threshold(ins[pos:pos + length])
        pos += length
        if plt is not None:
            state.kind, state.cfa_off, state.plt_k = KIND_PLT, plt[0], plt[1]
        else:
            state.kind = KIND_INVALID
    elif op in (0x10, 0x16):                                  # (val_)expression(reg)
        reg, pos = _uleb(ins, pos)
        length, pos = _uleb(ins, pos)
        pos += length
        if reg == cie.ra_reg:
            state.kind = KIND_INVALID
        elif reg == fp_reg:
            state.rbp_off = RBP_SAME   # rare (hand-written asm): keep the register as it is
    elif op in (0x14, 0x15):                                  # val_offset(_sf)
        reg, pos = _uleb(ins, pos)
        _, pos = (_uleb if op == 0x14 else _sleb)(ins, pos)
        if reg == cie.ra_reg:
            state.kind = KIND_INVALID
    elif op == 0x2E:                                          # GNU_args_size
        _, pos = _uleb(ins, pos)
    else:
        raise CfiError(f"CFA opcode {op:#x}")
    return pos


def _set_saved(state: _State, cie: _Cie, reg: int, off: int) -> None:
    if reg == cie.arch.fp:
        state.rbp_off = off
    elif reg == cie.ra_reg:
        state.ra_off = off


def _restore(state: _State, initial: _State | None, cie: _Cie, reg: int) -> None:
    base = initial or _State(cie.arch)
    if reg == cie.arch.fp:
        state.rbp_off = base.rbp_off
    elif reg == cie.ra_reg:
        state.ra_off = base.ra_off


def parse(data: bytes, section_addr: int, debug_frame: bool = False, arch: Arch = X86_64) -> tuple[list, int]:
    """Rows of every FDE in a .eh_frame or .debug_frame section, and the number of FDEs.

    Each FDE contributes its rows plus a KIND_END row at its end address, so a
    pc between functions finds no rule. Bad entries are skipped, not fatal.
    """
    rows: list[tuple[int, int, int, int, int]] = []
    cies: dict[int, _Cie] = {}
    initial_states: dict[int, _State] = {}
    size, fdes = len(data), 0
    for start, pos, end, cie_at in records(data, debug_frame):
        try:
            if cie_at is None:
                cies[start] = _parse_cie(data, pos, end, section_addr, debug_frame, arch)
            else:
                cie = cies.get(cie_at)
                if cie is None and cie_at < size:
                    # CIEs normally come first, but nothing requires it.
                    cie = cies[cie_at] = _parse_cie(data, _cie_body(data, cie_at), _entry_end(data, cie_at),
                                                    section_addr, debug_frame, arch)
                if cie is not None:
                    _fde(data, pos, end, cie, cie_at, initial_states, section_addr, debug_frame, rows)
                    fdes += 1
        except (CfiError, IndexError, struct.error, ValueError):
            pass
    return rows, fdes


def records(data: bytes, debug_frame: bool):
    """Each entry of a .eh_frame or .debug_frame section as (start, body, end, cie_at): `body` is
    where the entry's fields begin (after its length and CIE id), `cie_at` is None for a CIE and
    the section offset of its CIE for an FDE. Ends at the .eh_frame terminator or at an entry
    that runs past the section (both parsers of this package walk the records this way)."""
    pos, size = 0, len(data)
    while pos + 4 <= size:
        start = pos
        length = _U32.unpack_from(data, pos)[0]
        pos += 4
        if length == 0:
            if debug_frame:
                continue
            break              # .eh_frame terminator
        id_size = 4
        if length == 0xFFFFFFFF:
            length = _U64.unpack_from(data, pos)[0]
            pos += 8
            id_size = 8
        end = pos + length
        if end > size:
            break
        id_pos = pos
        cie_id = _U64.unpack_from(data, pos)[0] if id_size == 8 else _U32.unpack_from(data, pos)[0]
        pos += id_size
        if debug_frame:
            is_cie = cie_id == (0xFFFFFFFF if id_size == 4 else 0xFFFFFFFFFFFFFFFF)
        else:
            is_cie = cie_id == 0
        yield start, pos, end, None if is_cie else (cie_id if debug_frame else id_pos - cie_id)
        pos = end


def _entry_end(data: bytes, at: int) -> int:
    length = _U32.unpack_from(data, at)[0]
    if length == 0xFFFFFFFF:
        return at + 12 + _U64.unpack_from(data, at + 4)[0]
    return at + 4 + length


def _cie_body(data: bytes, at: int) -> int:
    length = _U32.unpack_from(data, at)[0]
    return at + (20 if length == 0xFFFFFFFF else 8)


def _fde(data: bytes, pos: int, end: int, cie: _Cie, cie_at: int, initial_states: dict, section_addr: int,
         debug_frame: bool, rows: list) -> None:
    if debug_frame:
        pc_begin, pos = _U64.unpack_from(data, pos)[0], pos + 8
        pc_range, pos = _U64.unpack_from(data, pos)[0], pos + 8
    else:
        pc_begin, pos = _encoded(data, pos, cie.fde_enc, section_addr)
        pc_range, pos = _encoded(data, pos, cie.fde_enc & 0x0F, 0)
    if cie.has_aug_data:
        length, pos = _uleb(data, pos)
        pos += length
    if pc_range == 0 or pc_begin == 0:
        return
    if cie.signal:
        # The trampoline's rules describe the kernel's rt_sigframe; the unwinder reads it directly.
        rows.append((pc_begin, KIND_SIGNAL, 0, 0, 0))
        rows.append((pc_begin + pc_range, KIND_END, 0, 0, 0))
        return
    initial = initial_states.get(cie_at)
    if initial is None:
        initial = _State(cie.arch)
        _execute(cie.initial, initial, None, cie, 0, None)
        initial_states[cie_at] = initial
    state = initial.copy()
    loc = _execute(data[pos:end], state, initial, cie, pc_begin, rows)
    rows.append(state.row(loc))
    rows.append((pc_begin + pc_range, KIND_END, 0, 0, 0))
