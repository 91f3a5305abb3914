/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Ruby frame walker, included by profile.bpf.c.
 *
 * For a process listed in `ruby_procs` (filled by userspace: runtimes/ruby/), find the sampled
 * thread's execution context (rb_execution_context_t) and record its control frames, leaf
 * first: per frame the iseq and pc of the control frame and the method entry and flags of its
 * environment (ep[-2], ep[0]). Names, files and lines are read later in userspace from the
 * target's memory; nothing here writes to the target.
 *
 * The execution context is per thread. Ruby 3.x keeps it in the thread-local `ruby_current_ec`:
 * in a shared libruby (RB_EC_DTV) it is found through the thread's DTV (fsbase+8 -> dtv[module]
 * -> the module's TLS block), in a static ruby (RB_EC_TP) at a fixed offset from fsbase. Older
 * rubies keep one global pointer (RB_EC_GLOBAL) or the main ractor's running one (RB_EC_RACTOR).
 *
 * Control frames grow down from the top of the VM stack: ec->cfp is the leaf, and the frame
 * just below vm_stack + vm_stack_size is the VM's dummy top frame, not recorded.
 * Transport as in python.h: the frames go into rb_stacks_<buffer> under a hash of their content,
 * which is the sample key's `runtime_stack`.
 */
#ifndef HOTSTACK_RUBY_H
#define HOTSTACK_RUBY_H

#include "schema.h"
#include "tls.h"
#include "runtime_common.h"

/* Structs rb_proc, rb_frame, rb_stack, enums rb_ec_mode, rb_stat and the maps: bpf/schema.yaml (group ruby). */
HS_RUBY_VARIABLES
HS_RUBY_MAPS

static __always_inline void rb_count(__u32 index)
{
	rt_add(&rb_stats, index, 1);
}

/* The sampled thread's execution context, 0 if it has none (a thread that never ran Ruby). */
static __always_inline __u64 rb_current_ec(const struct rb_proc *proc)
{
	__u64 block;

	switch (proc->ec_mode) {
	case RB_EC_GLOBAL:
		return rt_read_u64(proc->ec_address);
	case RB_EC_RACTOR:
		block = rt_read_u64(proc->ec_address);
		return block ? rt_read_u64(block + proc->running_ec) : 0;
	case RB_EC_DTV:
	case RB_EC_TP:
		/* the thread-local ruby_current_ec (TP: module 0) */
		return tls_read_variable(rb_fsbase_offset, proc->tls_module, proc->dtv_entry, proc->tls_offset);
	}
	return 0;
}

/* Walk the sampled thread's control frames; returns the rb_stacks key (0: no Ruby frames). */
static __always_inline __u64 ruby_walk(__u32 pid, __u32 buffer)
{
	const struct rb_proc *proc = bpf_map_lookup_elem(&ruby_procs, &pid);
	struct rb_stack *stack;
	__u32 zero = 0, n = 0;
	__u64 ec, cfp, end, head[3] = {}, hash = RT_HASH_START;
	int i;

	if (!proc)
		return 0;
	rb_count(RB_STAT_WALKS);
	stack = bpf_map_lookup_elem(&rb_scratch, &zero);
	if (!stack)
		return 0;
	ec = rb_current_ec(proc);
	if (!ec || bpf_probe_read_user(&head[0], 8, (void *)(ec + proc->ec_vm_stack)) ||
	    bpf_probe_read_user(&head[1], 8, (void *)(ec + proc->ec_vm_stack_size)) ||
	    bpf_probe_read_user(&head[2], 8, (void *)(ec + proc->ec_cfp)) || !head[2]) {
		rb_count(RB_STAT_NO_EC);
		return 0;
	}
	cfp = head[2];
	end = head[0] + head[1] * 8 - proc->cf_size;

	for (i = 0; i < RB_MAX_FRAMES; i++) {
		struct rb_frame *f = &stack->frames[i];
		__u64 cf[5] = {}, env[3] = {};

		if (cfp >= end || bpf_probe_read_user(cf, sizeof(cf), (void *)cfp))
			break;
		/* pc, sp, iseq, self, ep; the environment is ep[-2] (method entry), ep[-1], ep[0] (flags). */
		if (cf[4])
			bpf_probe_read_user(env, sizeof(env), (void *)(cf[4] - 16));
		f->iseq = cf[2];
		f->pc = cf[0];
		f->me = env[0];
		f->flags = (__u32)env[2];
		hash = rt_hash(hash, f->iseq ^ f->me);
		hash = rt_hash(hash, f->pc ^ ((__u64)f->flags << 32));
		n++;
		cfp += proc->cf_size;
	}
	stack->truncated = cfp < end;
	if (stack->truncated)
		rb_count(RB_STAT_TRUNCATED);
	if (n == 0)
		return 0;
	stack->len = n;
	stack->pid = pid;
	hash = rt_stack_key(hash, n, stack->truncated);
	return rt_store_stack(&rb_stacks_0, &rb_stacks_1, buffer, &hash, stack, &rb_stats, RB_STAT_STACKS_FULL);
}

#endif /* HOTSTACK_RUBY_H */
