/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PHP frame walker, included by profile.bpf.c.
 *
 * For a process listed in `php_procs` (filled by userspace: unwind/php/), follow
 * executor_globals.current_execute_data through prev_execute_data, leaf first, recording per
 * frame the zend_function, the opline and the call flags. PHP (NTS builds: php-cli, php-fpm)
 * runs one request per process, so the one global names the sampled thread's frames.
 * Names, files and lines are read later in userspace; nothing here writes to the target.
 * Transport as in python.h: php_stacks_<buffer> under a hash, the sample key's `runtime_stack`.
 */
#ifndef HOTSTACK_PHP_H
#define HOTSTACK_PHP_H

#include "schema.h"

HS_PHP_VARIABLES
HS_PHP_MAPS

static __always_inline void php_count(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&php_stats, &index);

	if (value)
		*value += 1;
}

/* Walk the current PHP frames; returns the php_stacks key (0: none). */
static __always_inline __u64 php_walk(__u32 pid, __u32 buffer)
{
	const struct php_proc *proc = bpf_map_lookup_elem(&php_procs, &pid);
	struct php_stack *stack;
	void *stacks;
	__u32 zero = 0, n = 0;
	__u64 ed = 0, hash = 0xcbf29ce484222325ULL;
	int i;

	if (!proc)
		return 0;
	php_count(PHP_STAT_WALKS);
	stack = bpf_map_lookup_elem(&php_scratch, &zero);
	if (!stack)
		return 0;
	if (bpf_probe_read_user(&ed, sizeof(ed), (void *)proc->current_execute_data) || !ed) {
		php_count(PHP_STAT_NO_FRAME);
		return 0;
	}
	for (i = 0; i < PHP_MAX_FRAMES; i++) {
		struct php_frame *f = &stack->frames[i];
		__u64 opline = 0, func = 0, prev = 0;
		__u32 info = 0;

		if (!ed)
			break;
		if (bpf_probe_read_user(&opline, 8, (void *)ed) ||
		    bpf_probe_read_user(&func, 8, (void *)(ed + proc->ed_func)) ||
		    bpf_probe_read_user(&prev, 8, (void *)(ed + proc->ed_prev))) {
			ed = 0;
			break;
		}
		bpf_probe_read_user(&info, 4, (void *)(ed + proc->ed_call_info));
		f->func = func;
		f->opline = opline;
		f->call_info = info;
		hash = (hash ^ func) * 0x100000001b3ULL;
		hash = (hash ^ opline ^ ((__u64)info << 32)) * 0x100000001b3ULL;
		n++;
		ed = prev;
	}
	stack->truncated = ed != 0;
	if (ed)
		php_count(PHP_STAT_TRUNCATED);
	if (n == 0)
		return 0;
	stack->len = n;
	stack->pid = pid;
	hash = (hash ^ n ^ ((__u64)stack->truncated << 32)) | 1;
	stacks = buffer ? (void *)&php_stacks_1 : (void *)&php_stacks_0;
	if (bpf_map_lookup_elem(stacks, &hash))
		return hash;
	if (bpf_map_update_elem(stacks, &hash, stack, BPF_ANY)) {
		php_count(PHP_STAT_STACKS_FULL);
		return 0;
	}
	return hash;
}

#endif /* HOTSTACK_PHP_H */
