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
 *
 * The innermost frame's opline: the VM stores it in the frame only before a call or what may
 * throw, so in a stretch that does neither (a tight arithmetic loop, more so in opcache's
 * optimized opcodes) the frame holds an earlier one. The current one is in a register
 * (php_register_opline).
 */
#ifndef HOTSTACK_PHP_H
#define HOTSTACK_PHP_H

#include "schema.h"
#include "runtime_common.h"

HS_PHP_VARIABLES
HS_PHP_MAPS

static __always_inline void php_count(__u32 index)
{
	rt_add(&php_stats, index, 1);
}

/*
 * Per CPU: the innermost frame's opline as php_register_opline found it (opline, and mask: all ones
 * where it is the register's, else 0). In map memory, whose values the verifier does not track:
 * the ways that led to it end alike, so the frames' loop after it is verified once.
 */
struct php_leaf {
	__u64 opline;
	__u64 mask;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct php_leaf);
} php_leaf SEC(".maps");

/*
 * The current opline of the frame at ed from the VM's registers of the sample (vm_fp, vm_ip; both 0
 * where the sample has no user registers at hand), into leaf. PHP built by GCC keeps the
 * execute_data it runs and its opline in registers (ARCH_REGS_PHP_FP, ARCH_REGS_PHP_IP:
 * bpf/arch.h) throughout zend_execute.c: execute_ex and the code it jumps and calls to there. That
 * code is more than execute_ex's symbol: the hybrid VM's handlers that are not hot, and the
 * helpers, are functions of their own, which a stripped binary names by no symbol (Debian's PHP
 * 7.4, 8.2 and 8.4 run a tight loop's ZEND_MOD in one), so no range of addresses marks where the
 * registers hold. Instead they are taken only as they must look there: the execute_data register
 * is ed itself and the opline register one of the opcodes of ed's user code (zend_op: 32
 * bytes). Elsewhere (code of another file the VM called, which may reuse them, or a build without
 * the global registers) they hold anything, and the frame's stored opline is kept.
 */
static __always_inline void php_register_opline(const struct php_proc *proc, struct php_leaf *leaf, __u64 ed,
						__u64 vm_fp, __u64 vm_ip)
{
	__u64 func = 0, opcodes = 0;
	__u32 last = 0;
	__u8 type = 0;

	leaf->opline = 0;
	leaf->mask = 0;
	if (vm_fp != ed || !proc->op_opcodes || !proc->op_last)
		return;
	if (bpf_probe_read_user(&func, 8, (void *)(ed + proc->ed_func)) ||
	    bpf_probe_read_user(&type, 1, (void *)func) || (type != 2 && type != 4) ||
	    bpf_probe_read_user(&opcodes, 8, (void *)(func + proc->op_opcodes)) ||
	    bpf_probe_read_user(&last, 4, (void *)(func + proc->op_last)))
		return;
	if (vm_ip < opcodes || vm_ip - opcodes >= (__u64)last * 32 || (vm_ip - opcodes) % 32)
		return;
	leaf->opline = vm_ip;
	leaf->mask = ~0ULL;
	php_count(PHP_STAT_REGISTER_OPLINE);
}

/* Walk the current PHP frames; returns the php_stacks key (0: none). vm_fp, vm_ip: the sample's
 * registers in which the VM may hold the innermost frame's execute_data and opline (0: not at hand). */
static __always_inline __u64 php_walk(__u32 pid, __u32 buffer, __u64 vm_fp, __u64 vm_ip)
{
	const struct php_proc *proc = bpf_map_lookup_elem(&php_procs, &pid);
	struct php_stack *stack;
	__u32 zero = 0, n = 0;
	struct php_leaf *leaf;
	__u64 ed = 0, hash = RT_HASH_START, leaf_opline, leaf_mask;
	int i;

	if (!proc)
		return 0;
	php_count(PHP_STAT_WALKS);
	stack = bpf_map_lookup_elem(&php_scratch, &zero);
	leaf = bpf_map_lookup_elem(&php_leaf, &zero);
	if (!stack || !leaf)
		return 0;
	if (bpf_probe_read_user(&ed, sizeof(ed), (void *)proc->current_execute_data) || !ed) {
		php_count(PHP_STAT_NO_FRAME);
		return 0;
	}
	php_register_opline(proc, leaf, ed, vm_fp, vm_ip);
	leaf_opline = leaf->opline;
	leaf_mask = leaf->mask;
	for (i = 0; i < PHP_MAX_FRAMES; i++) {
		struct php_frame *f = &stack->frames[i];
		__u64 block[8] = {}, head[2] = {}, file[2] = {}, name_h = 0, file_h = 0, opcodes = 0, func, opline, user;
		__u32 line = 0;

		if (!ed)
			break;
		/* zend_execute_data: opline 0, func, This (call info in its u1), prev: all in 56 bytes */
		if (bpf_probe_read_user(block, 56, (void *)ed)) {
			ed = 0;
			break;
		}
		func = block[(proc->ed_func >> 3) & 7];
		opline = (block[0] & ~leaf_mask) | (leaf_opline & leaf_mask);    /* no branch: see php_leaf */
		leaf_mask = 0;
		f->func = func;
		f->call_info = (__u32)block[(proc->ed_call_info >> 3) & 7];
		/*
		 * Straight-line reads, no branches (each branch would double the verifier's work over
		 * the 128 unrolled frames): a read from a null pointer plus an offset fails and leaves 0.
		 * function_name (fn_name is 8: checked in userspace) and, for an op_array (type 2, or 4
		 * for eval'd code: `php -r`, eval(); not 1, an internal function: bit 1 or 2 of the
		 * type, which is the first byte), its filename and line_start.
		 */
		bpf_probe_read_user(head, sizeof(head), (void *)func);
		user = -(((head[0] >> 1) | (head[0] >> 2)) & 1);
		bpf_probe_read_user(&name_h, 8, (void *)(head[1] + proc->str_h));
		bpf_probe_read_user(file, sizeof(file), (void *)((func + proc->fn_filename) & user));
		bpf_probe_read_user(&file_h, 8, (void *)(file[0] + proc->str_h));
		bpf_probe_read_user(&line, 4, (void *)(opline + proc->op_lineno));
		/*
		 * The VM stores the opline in the frame only before a call or what may throw: a frame
		 * just entered holds what an earlier frame left in that slot. The opline as an offset
		 * in the function's own opcodes, read now (code compiled per request moves between
		 * requests), lets userspace keep a line only from one of them.
		 */
		bpf_probe_read_user(&opcodes, 8, (void *)((func + proc->op_opcodes) & user));
		f->opline = opline - opcodes;
		f->ident = rt_hash(name_h * RT_HASH_PRIME, file_h) ^ (__u32)file[1];
		f->line = line;
		hash = rt_hash(hash, func ^ f->ident);
		hash = rt_hash(hash, f->opline ^ ((__u64)f->call_info << 32) ^ line);
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
	hash = rt_stack_key(hash, n, stack->truncated);
	return rt_store_stack(&php_stacks_0, &php_stacks_1, buffer, &hash, stack, &php_stats, PHP_STAT_STACKS_FULL);
}

#endif /* HOTSTACK_PHP_H */
