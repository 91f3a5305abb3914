/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PHP frame walker, included by profile.bpf.c.
 *
 * For a process listed in `php_procs` (filled by userspace: runtimes/php/), follow
 * executor_globals.current_execute_data through prev_execute_data, leaf first, recording per
 * frame the zend_function, the opline (as an offset in the function's opcodes), the call
 * flags, the opline's line and the function's identity at the sample: the hashes of its name
 * and file (interned strings carry theirs) and its first line. Code compiled per request (no opcache, closures) is freed when the request
 * ends and the next request's functions reuse its memory, often before userspace reads it:
 * userspace names a frame only from a function whose identity matches. PHP (NTS builds: php-cli,
 * php-fpm) runs one request per process, so the one global names the sampled thread's frames.
 * Names and files are read later in userspace; nothing here writes to the target.
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
		__u64 block[8] = {}, head[2] = {}, file[2] = {}, name_h = 0, file_h = 0, opcodes = 0, func;
		__u32 line = 0;

		if (!ed)
			break;
		/* zend_execute_data: opline 0, func, This (call info in its u1), prev: all in 56 bytes */
		if (bpf_probe_read_user(block, 56, (void *)ed)) {
			ed = 0;
			break;
		}
		func = block[(proc->ed_func >> 3) & 7];
		f->func = func;
		f->call_info = (__u32)block[(proc->ed_call_info >> 3) & 7];
		/*
		 * Straight-line reads, no branches (each branch would double the verifier's work over
		 * the 128 unrolled frames): a read from a null pointer plus an offset fails and leaves 0.
		 * function_name (fn_name is 8: checked in userspace) and, for an op_array (type 2, or 3
		 * for eval'd code: bit 1 of the type), its filename and line_start.
		 */
		bpf_probe_read_user(head, sizeof(head), (void *)func);
		bpf_probe_read_user(&name_h, 8, (void *)(head[1] + proc->str_h));
		bpf_probe_read_user(file, sizeof(file), (void *)((func + proc->fn_filename) & -((head[0] >> 1) & 1)));
		bpf_probe_read_user(&file_h, 8, (void *)(file[0] + proc->str_h));
		bpf_probe_read_user(&line, 4, (void *)(block[0] + proc->op_lineno));
		/*
		 * The VM stores the opline in the frame only before a call or what may throw: a frame
		 * just entered holds what an earlier frame left in that slot. The opline as an offset
		 * in the function's own opcodes, read now (code compiled per request moves between
		 * requests), lets userspace keep a line only from one of them.
		 */
		bpf_probe_read_user(&opcodes, 8, (void *)((func + proc->op_opcodes) & -((head[0] >> 1) & 1)));
		f->opline = block[0] - opcodes;
		f->ident = ((name_h * 0x100000001b3ULL) ^ file_h) * 0x100000001b3ULL ^ (__u32)file[1];
		f->line = line;
		hash = (hash ^ func ^ f->ident) * 0x100000001b3ULL;
		hash = (hash ^ f->opline ^ ((__u64)f->call_info << 32) ^ line) * 0x100000001b3ULL;
		n++;
		ed = block[(proc->ed_prev >> 3) & 7];
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
