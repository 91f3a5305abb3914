/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Native user-stack unwinding in the kernel, with .eh_frame-derived tables in BPF maps.
 *
 * The tables and their lookup: nu_rules.h; PC -> mapping: nu_mappings.h; the state and maps:
 * nu_maps.h.
 *
 * A PC in a file without a table is counted, its file queued in nu_missing for userspace to
 * build, and the rest of the stack is walked with frame pointers (counted): the next samples
 * are complete. Code that is in no file (JIT) is walked with frame pointers, counted.
 *
 * The walk: per-CPU state (struct nu_state), NU_FRAMES_PER_PROG frames per program, then a
 * tail call to the same program (nu_progs slot 0) until NU_MAX_FRAMES frames, the root
 * (a STOP row: _start, clone3, thread start), or an error. The includer defines the
 * program that runs the steps (NU_STEP_PROGRAM) and what happens at the end (nu_done()).
 */
#ifndef HOTSTACK_NATIVE_UNWIND_H
#define HOTSTACK_NATIVE_UNWIND_H

#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

#include "arch.h"
#include "schema.h"
#include "nu_procs.h"

/*
 * The runtime hook: a language runtime's recorder (bpf/v8.h) learns of every frame walked with
 * frame pointers (JIT code, code without tables: where a runtime's generated code is), with its pc,
 * its frame pointer and its position in the stack, before the step. The includer defines it
 * before including this file; by default it does nothing.
 */
#ifndef NU_RUNTIME_FRAME
#define NU_RUNTIME_FRAME(pc, fp, index) do { } while (0)
#endif

/*
 * The runtime step hook: a runtime whose generated code cannot be walked with frame pointers
 * (bpf/hotspot.h) steps a PC in anonymous executable memory itself: 1 if the PC is not its code
 * (frame pointers, as without the hook), 0 when it stepped st to the caller, -1 at the end.
 */
#ifndef NU_RUNTIME_JIT_STEP
#define NU_RUNTIME_JIT_STEP(st, pc, index) 1
#endif

/* Frames a walk records at most: NU_MAX_FRAMES (schema.yaml); past them the stack ends as
 * NU_END_TRUNCATED (userspace shows a [truncated] frame). The first NU_STORED_FRAMES are stored with
 * the stack's header in native_stacks, the rest of a deeper stack in native_tails (few stacks are:
 * the common map's values stay 1 KiB). */

/* Frames per deep step program: NU_MAX_FRAMES within the kernel's tail calls (32 on 5.10, 33
 * later), with an interpreter walker in front: 31 programs of 34 frames. The verifier checks every
 * step of the program's loop at every load: 34 steps are ~280k instructions (~0.5 CPU-s) without
 * the runtime hooks, ~300k with them (global functions, checked once). A bpf_loop of one step was
 * more (410k and 460k on 6.18, whose verifier follows a callback until its states converge). So
 * sampling starts with the shallow step programs (NU_LIST_FRAMES_PER_PROG frames each, 155 a walk,
 * a sixth of the verifier's work), and userspace puts the deep ones in their place when a walk is
 * first cut there (NU_STAT_SHALLOW_CUT: sampling/step_programs.py). */
#define NU_FRAMES_PER_PROG 34
/* ... where the program walks the VMA tree (6.1+). Where userspace keeps the mapping lists (5.10 to
 * 6.0) each step's binary search of the list makes it ~6 times the verifier's work: 34 steps were
 * past its 1M instructions, so 5 a program, and a walk there is cut (marked truncated) past 155
 * frames (31 programs). */
#define NU_LIST_FRAMES_PER_PROG 5

#include "nu_maps.h"
#include "nu_mappings.h"
#include "nu_rules.h"

static __always_inline int nu_read(__u64 *out, __u64 addr)
{
	return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
}

/* The frame stepped: its caller's sp, frame pointer and pc into st. Returns 0 to go on, -1 at a
 * return address of 0 (the outermost frame of code without CFI). */
static __always_inline int nu_to_caller(struct nu_state *st, __u64 sp, __u64 bp, __u64 ra)
{
	st->sp = sp;
	st->bp = bp;
	st->pc = ra;
	st->lr = 0;
	st->signal = 0;
	if (!ra) {
		st->stack.end = NU_END_ZERO;
		return -1;
	}
	return 0;
}

/*
 * One frame-pointer step: the caller's frame is at [bp]: saved bp, return address. `same_stack`:
 * the frame must lie just above sp (a sanity check for code without tables); Go's frames may be on
 * another stack (asmcgocall runs C on the g0 stack and keeps the goroutine's frame pointer in BP).
 */
static __always_inline int nu_fp_walk(struct nu_state *st, int same_stack)
{
	__u64 bp = st->bp, next_bp, ra;

	/* bp == sp: a frame with no locals (push rbp; mov rbp, rsp; call) seen from its callee */
	if (!bp || (bp & 7) || (same_stack && (bp < st->sp || bp - st->sp > (8 << 20)))) {
		st->stack.end = NU_END_BAD_FP;
		return -1;
	}
	if (nu_read(&next_bp, bp) || nu_read(&ra, bp + 8)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
	return nu_to_caller(st, bp + 16, next_bp, ARCH_STRIP_RA(ra));
}

static __always_inline int nu_fp_step(struct nu_state *st)
{
	return nu_fp_walk(st, 1);
}

/* A frame of code without a usable table: counted, shown to the runtime hook (in a step program
 * built with the hooks: `runtimes`), walked with frame pointers. */
static __always_inline int nu_fp_frame(struct nu_state *st, __u64 pc, __u32 index, int runtimes)
{
	nu_count(NU_STAT_FP_FRAMES);
	if (runtimes)
		NU_RUNTIME_FRAME(pc, st->bp, index);
	return nu_fp_step(st);
}

#if defined(__TARGET_ARCH_arm64)
/* arm64: the kernel's rt_sigframe at SP in the sigreturn trampoline: siginfo (128), then the
 * ucontext, whose uc_mcontext (16-aligned, at +176) holds fault_address, regs[31], sp, pc. */
#define NU_SIGCONTEXT (128 + 176)
#define NU_SIG_FP (NU_SIGCONTEXT + 8 + 29 * 8)
#define NU_SIG_LR (NU_SIGCONTEXT + 8 + 30 * 8)
#define NU_SIG_SP (NU_SIGCONTEXT + 8 + 31 * 8)
#define NU_SIG_PC (NU_SIGCONTEXT + 8 + 32 * 8)
#else
/* x86-64: the kernel's rt_sigframe at RSP after the handler returned into __restore_rt:
 * ucontext at +0 (pretcode popped), uc_mcontext at +40; rbp, rsp, rip at +80, +120, +128 of it. */
#define NU_SIG_FP (40 + 80)
#define NU_SIG_SP (40 + 120)
#define NU_SIG_PC (40 + 128)
#endif
static __always_inline int nu_signal_step(struct nu_state *st)
{
	__u64 base = st->sp, bp, sp, pc, lr = 0;

	if (nu_read(&bp, base + NU_SIG_FP) || nu_read(&sp, base + NU_SIG_SP) || nu_read(&pc, base + NU_SIG_PC)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
#ifdef NU_SIG_LR
	if (nu_read(&lr, base + NU_SIG_LR)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
#endif
	st->lr = lr;
	st->bp = bp;
	st->sp = sp;
	st->pc = pc;
	st->signal = 1;
	nu_count(NU_STAT_SIGNAL);
	return 0;
}

/* One word more into a running FNV-style hash. */
static __always_inline __u64 nu_mix(__u64 h, __u64 word)
{
	h ^= word;
	h *= NU_HASH_PRIME;
	return h ^ (h >> NU_HASH_SHIFT);
}

/* The leaf's file and file offset (the first frame), and the callers' hash (struct nu_stack.callers)
 * of the frames after it. Without a branch on n: a branch costs the verifier ~40% more instructions
 * in each step program (every unrolled step checked both ways). `keep` is all ones from the second
 * frame on, made by arithmetic the compiler cannot turn back into a compare. */
static __always_inline void nu_leaf_and_callers(struct nu_state *st, const struct nu_range *range, __u64 off, __u32 n)
{
	__u64 later = ((__u64)n + 0xffffffffULL) >> 32;     /* 0 at the leaf, 1 after (n < 2^32) */
	__u64 keep;

	asm volatile("" : "+r"(later));
	keep = -later;
	st->chash = (nu_mix(nu_mix(nu_mix(st->chash, range->ino), range->dev), off) & keep) | (st->chash & ~keep);
	st->stack.leaf_offset = (st->stack.leaf_offset & keep) | (off & ~keep);
	st->stack.leaf_ino = (st->stack.leaf_ino & keep) | (range->ino & ~keep);
	st->stack.leaf_dev = (__u32)(((__u64)st->stack.leaf_dev & keep) | ((__u64)range->dev & ~keep));
}

/* Step the frame at pc (the n-th) to its caller by its table rule: the caller's registers read
 * into st. Returns 0 to go on, -1 at the end (st->stack.end says why). */
static __always_inline int nu_step_by_rule(struct nu_state *st, struct nu_rule *rule, __u64 pc, __u32 n,
					   int runtimes)
{
	__u64 cfa;

	switch (rule->kind) {
	case NU_KIND_CFA_SP:
		cfa = st->sp + rule->cfa;
		break;
	case NU_KIND_CFA_FP:
		cfa = st->bp + rule->cfa;
		break;
	case NU_KIND_PLT:
		cfa = st->sp + rule->cfa + ((pc & 15) >= (__u64)rule->rbp ? 8 : 0);
		break;
	case NU_KIND_FP_GO:
		nu_count(NU_STAT_GO_FRAMES);
		return nu_fp_walk(st, 0);
	case NU_KIND_STOP:
		st->stack.end = NU_END_ROOT;
		return -1;
	case NU_KIND_SIGNAL:
		return nu_signal_step(st);
	case NU_KIND_UNKNOWN:
		/* code with neither CFI nor a frame pointer whose frame is not known: no caller is
		 * guessed (userspace shows the stack truncated) */
		st->stack.end = NU_END_INVALID;
		return -1;
	default:
		nu_count(NU_STAT_INVALID_RULE);
		return nu_fp_frame(st, pc, n, runtimes);
	}
#if defined(__TARGET_ARCH_arm64)
	/* before the prologue saved it (or in a leaf that never does) the return address is in the
	 * link register, which only the first frame (or a signal frame) still has */
	if (rule->ra == NU_RA_SAME && (!(n == 0 || st->signal) || !st->lr)) {
		nu_count(NU_STAT_INVALID_RULE);
		return nu_fp_frame(st, pc, n, runtimes);
	}
#endif
	/* From here on the frame is stepped (or the walk ends): the caller's registers are read
	 * straight into st, so that few values stay live across the reads (the step program with the
	 * runtime hooks has 512 bytes of BPF stack for itself and hs_step) */
	st->sp = cfa;
	st->pair[0] = st->bp;
#if defined(__TARGET_ARCH_arm64)
	if (rule->ra == NU_RA_SAME)
		st->pair[1] = st->lr;
	else
#endif
	if (nu_read(&st->pair[1], cfa + rule->ra)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
	if (rule->kind != NU_KIND_PLT && rule->rbp != NU_RBP_SAME && nu_read(&st->pair[0], st->sp + rule->rbp)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
	nu_count(NU_STAT_FRAMES);
	return nu_to_caller(st, st->sp, st->pair[0], ARCH_STRIP_RA(st->pair[1]));
}

/* Record st->pc and step to its caller. Returns 0 to go on, -1 at the end (st->stack.end says why).
 * `runtimes` (a constant of each step program) says whether the runtime hooks are called. */
static __always_inline int nu_step(struct nu_state *st, struct nu_ranges *pr, int runtimes)
{
	__u64 pc = st->pc, shown, lookup;
	struct nu_range *range = &st->range;
	struct nu_rule *rule;
	__u32 n = st->stack.n;

	if (n >= NU_MAX_FRAMES) {
		st->stack.end = NU_END_TRUNCATED;
		return -1;
	}
	/* a return address points after the call: look up the call itself */
	lookup = (n == 0 || st->signal) ? pc : pc - 1;
	/* recorded and hashed so; the frame is unwound from its pc */
	shown = (n == 0 && (pc - st->leaf_start < st->leaf_end - st->leaf_start ||
			    pc - st->leaf_part_start < st->leaf_part_end - st->leaf_part_start)) ? st->leaf_start : pc;
	st->stack.pcs[n] = shown;
	st->stack.n = n + 1;
	/* (hashed as it goes: a loop over up to NU_MAX_FRAMES addresses at the end would be most of
	 * the verifier's work on each step program) */
	st->ahash = nu_mix(st->ahash, shown);
	if (!st->mm) {
		/* task->mm is cleared in do_exit before the address space is torn down (exit_mmap:
		 * ~2% of an `xz -9` loop's samples); no user read can succeed from here on */
		st->stack.end = NU_END_EXITED;
		st->shared = 0;
		return -1;
	}
	if (!pr || nu_lookup_range(pr, st, lookup, range, !runtimes)) {
		st->stack.end = NU_END_NO_MAPPING;
		st->shared = 0;
		if (!nu_kernel_vma_walk) {
			struct nu_remap_value anywhere = {};

			if (bpf_map_update_elem(&nu_remap, &st->tgid, &anywhere, BPF_NOEXIST) == 0)
				NU_WAKE_USERSPACE();
		}
		return -1;
	}
	if (!range->ino) {
		int stepped;

		st->shared = 0;
		nu_count(NU_STAT_JIT);
		stepped = runtimes ? NU_RUNTIME_JIT_STEP(st, pc, n) : 1;
		if (stepped != 1)
			return stepped;
		return nu_fp_frame(st, pc, n, runtimes);
	}
	if (range->dev == NU_VDSO_DEV)
		st->shared = 0;
	st->xhash = nu_mix(nu_mix(nu_mix(st->xhash, range->ino), range->dev), shown + range->to_offset);
	nu_leaf_and_callers(st, range, shown + range->to_offset, n);
	rule = nu_find_rule(st, range, lookup);
	if (!rule)
		return nu_fp_frame(st, pc, n, runtimes);
	return nu_step_by_rule(st, rule, pc, n, runtimes);
}

static __always_inline struct nu_state *nu_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&nu_state_map, &zero);
}

/*
 * Start a walk for the current task from its user registers. Finds (or builds, in the kernel)
 * the process's mapping list. Returns the per-CPU state, or 0 if there is nothing to walk.
 */
static __always_inline struct nu_state *nu_begin(__u32 tgid, const struct arch_regs *regs)
{
	struct nu_state *st = nu_state();
	struct nu_ranges *pr, *fresh;
	__u32 zero = 0;
	__u64 mm;

	if (!st)
		return 0;
	st->pc = regs->ip;
	st->sp = regs->sp;
	st->bp = regs->fp;
	st->lr = regs->lr;
	st->tgid = tgid;
	st->stack.n = 0;
	st->stack.end = NU_END_NONE;
	st->signal = 0;
	st->xhash = NU_HASH_BASIS;
	st->chash = NU_HASH_BASIS;
	st->ahash = NU_HASH_BASIS;
	st->shared = 1;
	st->leaf_start = 0;
	st->leaf_end = 0;
	st->leaf_part_start = 0;
	st->leaf_part_end = 0;
	st->file_key.ino = 0;     /* no file looked up yet (0: anonymous memory, never looked up) */
	nu_count(NU_STAT_WALKS);
	mm = nu_current_mm();
	st->mm = mm;
	/* no address space (past exit_mm: the walk ends as exited at its first step): the cache is
	 * left as it is, for userspace to name the samples the process left (exited_mappings) */
	if (!nu_kernel_vma_walk || !mm)
		return st;
	st->seq = nu_mm_stamp(mm);
	pr = bpf_map_lookup_elem(&nu_procs, &tgid);
	if (pr && pr->mm == mm) {
		/* before mm_lock_seq (6.4), the executable file mappings made since the cache was made
		 * (mappings.bpf.c) are mixed in: a library swapped for another of the same page counts
		 * leaves the stamp's counts unchanged */
		if (!nu_off_mm_seq)
			st->seq ^= pr->mapped * 0x85ebca6bU;
		return st;
	}
	/* a new process or an exec (a new mm): an empty cache */
	fresh = bpf_map_lookup_elem(&nu_scratch, &zero);   /* never written but for this field */
	if (!fresh)
		return st;
	fresh->mm = mm;
	bpf_map_update_elem(&nu_procs, &tgid, fresh, BPF_ANY);
	return st;
}

/* Up to NU_FRAMES_PER_PROG steps (`deep`; else NU_LIST_FRAMES_PER_PROG); 1 if the walk is over.
 * `runtimes`: call the runtime hooks. Both are constants: each step program is built with its own. */
static __always_inline int nu_steps(struct nu_state *st, int runtimes, int deep)
{
	struct nu_ranges *pr = bpf_map_lookup_elem(&nu_procs, &st->tgid);
	int i;

	if (!pr && st->stack.n == 0)
		nu_count(NU_STAT_NO_RANGES);
	/* (the bound is known at load: nu_kernel_vma_walk is read-only) */
	for (i = 0; i < (deep && nu_kernel_vma_walk ? NU_FRAMES_PER_PROG : NU_LIST_FRAMES_PER_PROG); i++) {
		if (nu_step(st, pr, runtimes))
			return 1;
	}
	return st->stack.n >= NU_MAX_FRAMES;
}

static __always_inline void nu_count_end(struct nu_state *st)
{
	switch (st->stack.end) {
	case NU_END_ROOT: nu_count(NU_STAT_END_ROOT); break;
	case NU_END_ZERO: nu_count(NU_STAT_END_ZERO); break;
	case NU_END_NONE:
	case NU_END_TRUNCATED: st->stack.end = NU_END_TRUNCATED; nu_count(NU_STAT_END_TRUNCATED); break;
	case NU_END_NO_MAPPING: nu_count(NU_STAT_END_NO_MAPPING); break;
	case NU_END_BAD_FP: nu_count(NU_STAT_END_BAD_FP); break;
	case NU_END_READ: nu_count(NU_STAT_END_READ); break;
	case NU_END_EXITED: nu_count(NU_STAT_END_EXITED); break;
	default: nu_count(NU_STAT_END_INVALID); break;
	}
}

/* A 64-bit hash of the walked frames (the stack's key), also stored in st->stack.hash, with the
 * process whose addresses the stack holds: by file and file offset when every frame is in a file
 * (struct nu_stack), else by address and process. */
static __always_inline __u64 nu_hash(struct nu_state *st)
{
	__u64 h;

	st->stack.pid = st->tgid;
	st->stack.by_file = st->shared && st->stack.n;
	st->stack.callers = 0;
	if (st->stack.by_file) {
		h = nu_mix(nu_mix(st->xhash, st->stack.n), st->stack.end);
		st->stack.callers = nu_mix(nu_mix(st->chash, st->stack.n), st->stack.end);
	} else {
		h = nu_mix(nu_mix(st->ahash, st->stack.n), st->tgid);
	}
	h = h ? h : 1;
	st->stack.hash = h;
	return h;
}

#endif
