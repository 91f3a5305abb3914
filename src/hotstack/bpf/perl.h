/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Perl frame walker, included by profile.bpf.c.
 *
 * For a process listed in `perl_procs` (filled by userspace: runtimes/perl/), find the sampled
 * thread's interpreter and record its context stack, innermost entry first: per entry its type,
 * CV, blk_oldcop (the statement that entered it) and return op, and PL_curcop once. Which entries
 * are frames (subs, evals) and the statement each frame is at are worked out in userspace
 * (runtimes/perl/frames.py), as are names, files and lines; nothing here writes to the target.
 * The walk records every entry in order (loops and blocks too) so that the verifier sees one
 * path per position, not one per count of frames found.
 *
 * Perl calls Perl subs without recursing in C: every frame of one runloop (Perl_runops_standard)
 * is on the one context stack. A runloop entered from C with a stack of its own (PUSHSTACKi:
 * sort blocks, DESTROY, tie, signal handlers) has its own stackinfo, reached through si_prev;
 * an entry flagged `runlevel` is recorded between them.
 *
 * The interpreter (with MULTIPLICITY, all PL_ variables are members of it) is per thread: in
 * 5.36+ the thread-local PL_current_context (tls.h), before that PL_curinterp (the main
 * interpreter; walked only on the process's main thread).
 * Transport as in python.h: perl_stacks_<buffer> under a hash, the sample key's `runtime_stack`.
 */
#ifndef HOTSTACK_PERL_H
#define HOTSTACK_PERL_H

#include "schema.h"
#include "tls.h"
#include "runtime_common.h"

HS_PERL_VARIABLES
HS_PERL_MAPS

static __always_inline void perl_count(__u32 index)
{
	rt_add(&perl_stats, index, 1);
}

/* The sampled thread's interpreter (0: none); PERL_INTERP_STATIC has none and uses addresses. */
static __always_inline __u64 perl_interp(const struct perl_proc *proc, __u32 pid, __u32 tid)
{
	switch (proc->interp_mode) {
	case PERL_INTERP_TP:
		return tls_read_variable(perl_fsbase_offset, 0, 0, proc->tls_offset);
	case PERL_INTERP_DTV:
		return tls_read_variable(perl_fsbase_offset, proc->tls_module, proc->dtv_entry, proc->tls_offset);
	case PERL_INTERP_GLOBAL:
		return tid == pid ? rt_read_u64(proc->interp_address) : 0;
	}
	return 0;
}

/* Walk the sampled thread's context stack; returns the perl_stacks key (0: none). */
static __always_inline __u64 perl_walk(__u32 pid, __u32 tid, __u32 buffer)
{
	const struct perl_proc *proc = bpf_map_lookup_elem(&perl_procs, &pid);
	struct perl_stack *stack;
	__u32 zero = 0, n = 0;
	__u64 interp, si, cxstack, hash = RT_HASH_START;
	__s32 ix32 = -1;
	__s64 ix;
	int i;

	if (!proc)
		return 0;
	perl_count(PERL_STAT_WALKS);
	stack = bpf_map_lookup_elem(&perl_scratch, &zero);
	if (!stack)
		return 0;
	interp = perl_interp(proc, pid, tid);
	if (!interp && proc->interp_mode != PERL_INTERP_STATIC) {
		perl_count(PERL_STAT_NO_INTERP);
		return 0;
	}
	si = rt_read_u64(interp + proc->curstackinfo);
	if (!si || bpf_probe_read_user(&ix32, 4, (void *)(si + proc->si_cxix))) {
		perl_count(PERL_STAT_NO_INTERP);
		return 0;
	}
	stack->curcop = rt_read_u64(interp + proc->curcop);
	cxstack = rt_read_u64(si + proc->si_cxstack);
	ix = ix32;

	for (i = 0; i < PERL_MAX_CONTEXTS; i++) {
		struct perl_context *c = &stack->contexts[i];

		c->type = 0;
		c->runlevel = 0;
		if (ix < 0) {
			/* this runloop's stack is done: the next one out, if any */
			si = rt_read_u64(si + proc->si_prev);
			if (!si)
				break;
			ix32 = -1;
			bpf_probe_read_user(&ix32, 4, (void *)(si + proc->si_cxix));
			cxstack = rt_read_u64(si + proc->si_cxstack);
			ix = ix32;
			c->runlevel = 1;
			c->cv = c->oldcop = c->retop = 0;
		} else {
			__u64 cx = cxstack + (__u64)ix * proc->cx_size;

			ix--;
			bpf_probe_read_user(&c->type, 1, (void *)cx);
			bpf_probe_read_user(&c->cv, 8, (void *)(cx + proc->cx_sub_cv));
			bpf_probe_read_user(&c->oldcop, 8, (void *)(cx + proc->cx_oldcop));
			bpf_probe_read_user(&c->retop, 8, (void *)(cx + proc->cx_retop));
		}
		hash = rt_hash(hash, c->cv ^ ((__u64)c->type << 56) ^ ((__u64)c->runlevel << 48));
		hash = rt_hash(hash, c->oldcop ^ c->retop);
		n = i + 1;
	}
	stack->truncated = si != 0 && n == PERL_MAX_CONTEXTS;
	if (stack->truncated)
		perl_count(PERL_STAT_TRUNCATED);
	stack->len = n;
	stack->pid = pid;
	hash = rt_hash(hash, stack->curcop);
	hash = rt_stack_key(hash, n, stack->truncated);
	return rt_store_stack(&perl_stacks_0, &perl_stacks_1, buffer, &hash, stack, &perl_stats, PERL_STAT_STACKS_FULL);
}

#endif /* HOTSTACK_PERL_H */
