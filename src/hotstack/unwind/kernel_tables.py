"""Per-file unwind tables in the form the kernel unwinder reads (bpf/native_unwind.h).

A FileTable is one file's rows, keyed by *file offset* (so that the kernel can look a PC up
from the VMA alone: offset = pc - vm_start + vm_pgoff * PAGE_SIZE) with a rule id local to the
file. Rules are tiny and few (a few hundred per file, ~10k on a whole desktop): the BPF side keeps
one deduplicated rule array for every file, and `RuleSet` maps local ids to global ones when a
table is loaded.

Sources: .eh_frame (+ .debug_frame of the file and of its separate debug file) through the
vectorized builder (builder.py), and Go's .gopclntab: every Go function gets one frame-pointer
row (the Go ABI keeps RBP as a frame pointer), as the OpenTelemetry profiler does.

Built tables are kept by table_cache.TableCache, keyed by content_key.
"""

from __future__ import annotations

import array
from dataclasses import dataclass

import numpy as np

from ..bpf import schema
from ..content_hash import blake2b
from ..symbols.elf import ElfError, ElfFile
from ..symbols.gopclntab import GoPclntabError, find_pclntab
from . import cfi
from .builder import build_table_fast
from .code_rows import KIND_UNKNOWN, code_rows
from .table import UnwindTable

KIND_FP_GO = schema.NU_KIND_FP_GO      # CFA = RBP + 16, return address at CFA - 8, caller's RBP at CFA - 16
RBP_SAME_K = schema.NU_RBP_SAME        # the kernel's "RBP unchanged" (s16)
RA_SAME_K = schema.NU_RA_SAME          # ... "the return address is in the link register" (arm64)
RULE_DTYPE = np.dtype(list(schema.NU_RULE_COLUMNS))     # struct nu_rule
_S16 = (-32767, 32767)                 # the kernel rule's rbp and ra (-32768 is RBP_SAME / RA_SAME)
_S32 = (-(1 << 31), (1 << 31) - 1)     # its cfa


def rule(kind: int, cfa: int = 0, rbp: int = 0, ra: int = 0) -> tuple:
    """One struct nu_rule as a RULE_DTYPE record (its fields in the schema's order)."""
    values = {"kind": kind, "cfa": cfa, "rbp": rbp, "ra": ra}
    return tuple(values.get(name, 0) for name in RULE_DTYPE.names)
MAX_ROWS_PER_FILE = 1 << 22
INDEX_SHIFT = schema.NU_INDEX_SHIFT    # the page index's pages, 1 KiB of file offsets
CONTENT_SECTIONS = (".eh_frame", ".eh_frame_hdr", ".debug_frame", ".gopclntab")


@dataclass
class FileTable:
    """Rows of one file: offsets (uint32, sorted) and rule ids into `rules` (a RULE_DTYPE array)."""

    offsets: np.ndarray
    rule_ids: np.ndarray
    rules: np.ndarray
    key: str                  # content key (see content_key)
    source: str

    @property
    def nbytes(self) -> int:
        return int(self.offsets.nbytes + self.rule_ids.nbytes + self.rules.nbytes) + 200

    def __len__(self) -> int:
        return len(self.offsets)

    def rows_u64(self, global_ids: np.ndarray) -> np.ndarray:
        """The kernel's row words: file offset << 32 | global rule id (sorted, so one u64 compare
        per binary-search step)."""
        # (in place: one array of the rows' size, not four; a large library's table is millions of
        # rows, and its load is a peak of our RSS)
        rows = self.offsets.astype(np.uint64)
        rows <<= np.uint64(32)
        ids = global_ids[self.rule_ids]
        rows |= ids if ids.dtype.kind == "u" else ids.astype(np.uint64)    # (numpy ORs no signed into unsigned)
        return rows

    def page_index(self, shift: int = INDEX_SHIFT) -> tuple[int, np.ndarray]:
        """(the first row's page, one word per page from it to the last row's): the rows of page p
        are [word & 0xffffffff, word >> 32) (bpf/native_unwind.h, nu_find_rule)."""
        if not len(self.offsets):
            return 0, np.zeros(0, np.uint64)
        offsets = self.offsets
        base = int(offsets[0]) >> shift
        starts = np.arange(base, (int(offsets[-1]) >> shift) + 2, dtype=np.int64) << shift
        # (searched in the offsets' own type where the pages' starts fit it: a search in a wider type
        # converts the whole column first)
        if int(starts[-1]) <= np.iinfo(offsets.dtype).max:
            starts = starts.astype(offsets.dtype)
        bounds = np.searchsorted(offsets, starts, side="left").astype(np.uint64)
        return base, bounds[:-1] | (bounds[1:] << np.uint64(32))


def content_key(elf: ElfFile) -> str:
    """size + hash of the program headers and of every section the rows are built from."""
    h = blake2b(digest_size=16)
    h.update(elf.size.to_bytes(8, "little"))
    for seg in elf.segments:
        h.update(b"%d:%d:%d:%d:%d;" % (seg.vaddr, seg.offset, seg.filesz, seg.memsz, seg.flags))
    for name in CONTENT_SECTIONS:
        section = elf.section(name)
        if section is None or section.type == 8:
            continue
        h.update(name.encode() + b"%d:%d;" % (section.addr, section.size))
        elf.hash_into(h, section.offset, section.size)
    return f"{elf.size:x}-{h.hexdigest()}"


def kernel_rules(table: UnwindTable) -> np.ndarray:
    """cfi rules -> RULE_DTYPE (an offset that does not fit its field, 32 bits for the CFA and 16
    for the saved registers, makes the rule invalid)."""
    out = np.zeros(len(table.rules), RULE_DTYPE)
    for i, r in enumerate(table.rules):
        kind, cfa, rbp, ra = r.kind, r.cfa_offset, r.rbp_offset, r.ra_offset
        if kind in (cfi.KIND_CFA_SP, cfi.KIND_CFA_FP, cfi.KIND_PLT):
            rbp = RBP_SAME_K if rbp == cfi.RBP_SAME else rbp
            in_lr = ra == cfi.RA_SAME and kind != cfi.KIND_PLT
            if (not _S32[0] <= cfa <= _S32[1] or not _S16[0] <= (0 if in_lr else ra) <= _S16[1]
                    or not RBP_SAME_K <= rbp <= _S16[1]):
                kind, cfa, rbp, ra = cfi.KIND_INVALID, 0, 0, 0
            elif in_lr:
                ra = RA_SAME_K
        else:
            cfa = rbp = ra = 0
        out[i] = rule(kind, cfa, rbp, ra)
    return out


def build_file_table(elf: ElfFile, debug_elf: ElfFile | None = None, key: str | None = None) -> FileTable:
    # Go's rows follow the x86-64 Go ABI (frame pointer below the return address); elsewhere CFI only
    go = _go_rows(elf) if elf.machine == cfi.EM_X86_64 else None
    table = build_table_fast(elf, debug_elf, debug_frame=go is None)
    rules = kernel_rules(table)
    # ids as int32 and the temporaries below dropped as soon as used: a large Go binary's build
    # (300k+ rows) peaks ~25 MB higher with int64/float64 arrays kept to the end
    pcs, ids = table.pcs, table.rule_ids.astype(np.int32)
    source = table.source
    is_go = go is not None
    if is_go:
        go_pcs, go_deltas, go_ends = go
        del go
        # Go functions: a row per SP delta (FRAME_POINTER: the Go ABI's frame pointer), an invalid
        # row at each end; CFI rows (C code of cgo binaries) win where both describe an address,
        # except the CFI's end rows.
        deltas, delta_ids = np.unique(go_deltas, return_inverse=True)
        del go_deltas
        go_rules = [rule(KIND_FP_GO, 16, -16, -8) if d == GO_FRAME_POINTER else
                    rule(cfi.KIND_STOP) if d == GO_THREAD_ROOT else
                    rule(cfi.KIND_CFA_SP, int(d) + 8, -16 if d >= 8 else RBP_SAME_K, -8) for d in deltas.tolist()]
        inv_id = len(rules) + len(go_rules)
        go_ids = (len(rules) + delta_ids).astype(np.int32)
        del delta_ids
        rules = np.concatenate((rules, np.array([*go_rules, rule(cfi.KIND_INVALID)], RULE_DTYPE)))
        # at one pc the highest rank wins: a function's end 0, a CFI end row 1, Go's row 2, CFI's 3
        cfi_rank = np.where(rules["kind"][ids] == cfi.KIND_INVALID, 1, 3).astype(np.int8)
        rank = np.concatenate((np.zeros(len(go_ends), np.int8), np.full(len(go_pcs), 2, np.int8), cfi_rank))
        del cfi_rank
        all_pcs = np.concatenate((go_ends, go_pcs, pcs))
        all_ids = np.concatenate((np.full(len(go_ends), inv_id, np.int32), go_ids, ids))
        del go_ends, go_pcs, go_ids, pcs, ids
        pcs, ids = _highest_ranked(all_pcs, all_ids, rank)
        del all_pcs, all_ids, rank
        source = "+".join(filter(None, (source, ".gopclntab")))
    if not is_go:
        pcs, ids, rules, analysed = _with_code_rows(elf, pcs, ids, rules)
        source = "+".join(filter(None, (source, "code" if analysed else "")))
    pcs, ids, rules = _entry_stops(elf, pcs, ids, rules)
    offsets, keep = _to_file_offsets(elf, pcs.astype(np.uint64, copy=False))
    ids = ids[keep]
    # consecutive rows with the same rule: one row
    change = np.ones(len(ids), bool)
    change[1:] = ids[1:] != ids[:-1]
    offsets, ids = offsets[change], ids[change]
    if len(offsets) > MAX_ROWS_PER_FILE:
        offsets, ids = offsets[:0], ids[:0]
    return FileTable(offsets.astype(np.uint32), ids.astype(np.uint16 if len(rules) < 1 << 16 else np.uint32),
                     rules, key or content_key(elf), source)


def _with_code_rows(elf: ElfFile, pcs: np.ndarray, ids: np.ndarray, rules: np.ndarray):
    """The CFI's rows with code_rows' rows for the code it does not describe (musl's libc): these
    lie in the CFI's gaps and win over the INVALID row where a gap begins. (pcs, ids, rules,
    whether any were added)."""
    code_pcs, code_rules = code_rows(elf, pcs, rules["kind"][ids] if len(ids) else np.zeros(0, np.uint8))
    if not code_pcs:
        return pcs, ids, rules, False
    unique, code_ids = np.unique(np.array([rule(*r) for r in code_rules], RULE_DTYPE), return_inverse=True)
    all_pcs = np.concatenate((pcs.astype(np.uint64), np.array(code_pcs, np.uint64)))
    all_ids = np.concatenate((ids.astype(np.int32), (len(rules) + code_ids).astype(np.int32)))
    # at one pc a CFI row wins over a code row, a code row over the CFI's INVALID (an FDE's end)
    cfi_rank = np.where(rules["kind"][ids] == cfi.KIND_INVALID, 0, 2).astype(np.int8)
    code_rank = np.where(np.array([r[0] for r in code_rules]) == cfi.KIND_INVALID, 0, 1).astype(np.int8)
    pcs, ids = _highest_ranked(all_pcs, all_ids, np.concatenate((cfi_rank, code_rank)))
    return pcs, ids, np.concatenate((rules, unique)), True


def _highest_ranked(pcs: np.ndarray, ids: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by pc, one per pc: the one of highest rank there."""
    order = np.lexsort((rank, pcs))
    pcs, ids = pcs[order], ids[order]
    last = np.ones(len(pcs), bool)
    last[:-1] = pcs[1:] != pcs[:-1]
    return pcs[last], ids[last]


def _entry_stops(elf: ElfFile, pcs: np.ndarray, ids: np.ndarray, rules: np.ndarray):
    """The entry point's code of a file the kernel starts (a program, or the dynamic loader), where
    no CFI describes it, is the process's outermost frame: a STOP row from the entry to the next
    row. The dynamic loader's `_start`/`_dl_start_user` (glibc's ld.so) has no CFI at all: a return
    address there (a sample while the loader maps the program's libraries) would be looked up as
    "no rule", walked on by frame pointers and end as a bad frame pointer, a whole stack counted
    short. Not in a shared library, whose e_entry some linkers set to the start of its text (code
    that runs in calls like any other; about 2% of files with an entry point). Nor an
    entry inside described code (a program's `_start`, whose CFI says the return address is
    undefined) or past the last row (no next row to bound it)."""
    entry = elf.entry
    if not entry or not len(pcs) or not (elf.has_interp or not elf.needs_libraries()):
        return pcs, ids, rules
    i = int(np.searchsorted(pcs, np.uint64(entry), side="right")) - 1
    if i + 1 >= len(pcs) or (i >= 0 and rules["kind"][ids[i]] not in (cfi.KIND_INVALID, KIND_UNKNOWN)):
        return pcs, ids, rules
    if i >= 0 and int(pcs[i]) == entry:
        ids = ids.copy()
        ids[i] = len(rules)
    else:
        pcs = np.insert(pcs, i + 1, np.asarray(entry, dtype=pcs.dtype))
        ids = np.insert(ids, i + 1, len(rules))
    return pcs, ids, np.concatenate((rules, np.array([rule(cfi.KIND_STOP)], RULE_DTYPE)))


GO_FRAME_POINTER = -1       # a Go row walked by its frame pointer (KIND_FP_GO), not by an SP delta
GO_THREAD_ROOT = -2         # a STOP row: the root of a thread the runtime starts (GO_THREAD_ROOTS)
GO_MAX_DELTA = _S32[1] - 8  # a larger frame (none in practice) uses the frame pointer: the CFA offset is 32-bit
# Runtime assembly that switches stacks (C code runs on the g0 stack; the goroutine's frame pointer
# stays in RBP): its SP deltas do not describe the switched stack, so it keeps the frame-pointer rule.
GO_STACK_SWITCHERS = ("runtime.asmcgocall", "runtime.systemstack", "runtime.mcall", "runtime.morestack",
                      "runtime.cgocallback", "runtime.rt0_go", "runtime.goexit", "runtime.gogo")
# The vDSO callers: they move SP to the g0 stack (nanotime1, time.now) or align it (vgetrandom1) with
# instructions the pcsp stream does not follow. Their frame pointer stays on the goroutine's stack,
# where the vDSO's code (its own table, symbols/vdso.py) returns into them: an SP delta would read
# the g0 stack's stale words (a made-up runtime.newproc caller), the frame pointer finds the caller.
# The first function of every thread the runtime starts (runtime.clone's child calls it on the new
# stack, whose words above it are no frame): the walk ends there, as Go's own tracebacks do.
GO_THREAD_ROOTS = frozenset(("runtime.mstart",))
GO_VDSO_CALLERS = frozenset(("runtime.nanotime1", "time.now", "runtime.vgetrandom1"))


# The pages of the file that the walk of Go's functions read (the section is mapped: each function's
# pcsp stream, name and entry) go from the resident set after this many functions: a large Go binary's
# .gopclntab (the OpenTelemetry Collector's: 14 MB) would otherwise stay resident until the build
# ends, half the build's peak RSS. Read again they are page-cache hits.
GO_RELEASE_EVERY = 8192


def _go_rows(elf: ElfFile) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(pcs, SP deltas, function ends) of Go's rows, from each function's pcsp stream: the return
    address is at SP + delta, the caller's RBP (once the prologue pushed it) at SP + delta - 8.
    Exact at every instruction, where a frame-pointer walk would skip the caller of a frameless
    leaf and of any function before its prologue set RBP. GO_FRAME_POINTER for the runtime's
    stack switchers and functions without a pcsp stream."""
    try:
        tab = find_pclntab(elf)
    except (GoPclntabError, ElfError):
        return None
    if tab is None or not len(tab):
        return None
    # typed arrays, not lists: a large Go binary has ~300k rows, and a list of Python ints is
    # ~36 bytes a row where these are 8 and 4 (the build's peak memory)
    pcs = array.array("Q")
    deltas = array.array("i")
    for i, entry in enumerate(tab.entries.tolist()):
        if i % GO_RELEASE_EVERY == GO_RELEASE_EVERY - 1:
            elf.release_pages()
        try:
            name = tab.name(i, remember=False)
            steps = [] if name.startswith(GO_STACK_SWITCHERS) or name in GO_VDSO_CALLERS else tab.sp_deltas(i)
            if name in GO_THREAD_ROOTS:
                steps = [(entry, GO_THREAD_ROOT)]
        except GoPclntabError:
            steps = []
        if not steps or any(not 0 <= d <= GO_MAX_DELTA and d != GO_THREAD_ROOT for _, d in steps):
            steps = [(entry, GO_FRAME_POINTER)]
        for pc, delta in steps:
            if not deltas or pcs[-1] < entry or deltas[-1] != delta:
                pcs.append(pc)
                deltas.append(delta)
    return np.frombuffer(pcs, np.uint64), np.frombuffer(deltas, np.int32), tab.ends.astype(np.uint64)


def _to_file_offsets(elf: ElfFile, pcs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ELF virtual addresses -> file offsets through the executable PT_LOAD segments."""
    segs = sorted((s for s in elf.segments if s.flags & 1), key=lambda s: s.vaddr)
    if not segs or not len(pcs):
        return np.zeros(0, np.uint64), np.zeros(len(pcs), bool)
    # segment by segment (there are few): masks of a byte a row, where indexes into the segment
    # list would be three int64 arrays the size of the table
    keep = np.zeros(len(pcs), bool)
    off = np.zeros(len(pcs), np.uint64)
    for s in segs:      # in address order: a pc at one's end and the next one's start is the next one's
        # an end row at the very end of the segment still matters: it stops the last function
        inside = (pcs >= np.uint64(s.vaddr)) & (pcs <= np.uint64(s.vaddr + max(s.filesz, s.memsz)))
        off[inside] = pcs[inside] - np.uint64(s.vaddr - s.offset)
        keep |= inside
    keep &= off < (1 << 32)
    return off[keep], keep


class RuleSet:
    """The global rule array the kernel indexes: local rules -> global ids, deduplicated."""

    def __init__(self, capacity: int = 1 << 16) -> None:
        self.capacity = capacity
        self.rules: list[bytes] = []
        self._ids: dict[bytes, int] = {}
        self.dropped = 0

    def ids_for(self, rules: np.ndarray) -> tuple[np.ndarray, list[tuple[int, bytes]]]:
        """Global ids for `rules`, and the (id, bytes) of rules new to the set (to write to the kernel).
        A rule that finds no room maps to 0 (the invalid rule, written first)."""
        if not self.rules:
            self._add(np.zeros(1, RULE_DTYPE).tobytes())
        out = np.zeros(len(rules), np.uint32)
        new = []
        for i, raw in enumerate(rules.tobytes()[k:k + RULE_DTYPE.itemsize]
                                for k in range(0, len(rules) * RULE_DTYPE.itemsize, RULE_DTYPE.itemsize)):
            gid = self._ids.get(raw)
            if gid is None:
                if len(self.rules) >= self.capacity:
                    self.dropped += 1
                    continue
                gid = self._add(raw)
                new.append((gid, raw))
            out[i] = gid
        return out, new

    def _add(self, raw: bytes) -> int:
        gid = len(self.rules)
        self.rules.append(raw)
        self._ids[raw] = gid
        return gid
