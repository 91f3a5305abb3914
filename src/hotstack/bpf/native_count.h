/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The end of a kernel-unwound sample, shared by every stack-counting program that unwinds user
 * stacks in the kernel (profile.bpf.c, probe.bpf.c): the program that starts the walk leaves its
 * key, comm, buffer and value in struct nu_state.ctx_words and tail-calls its step program, which
 * calls native_step_and_count(). The stack goes to native_stacks_<buffer> under a 31-bit id (the
 * low bits of its hash; another stack already there under that id is a counted collision) and the
 * sample is counted under key.user_stack_id = that id (sampling/buffers.py reads them).
 */
#ifndef HOTSTACK_NATIVE_COUNT_H
#define HOTSTACK_NATIVE_COUNT_H

#include "schema.h"
#include "counts.h"
#include "native_unwind.h"

/* The hook where a walk has begun (its state in nu_state.ctx_words), before the first step: may
 * tail-call elsewhere first (profile.bpf.c: an interpreter's walker, which goes on to the step
 * program). Default: nothing. */
#ifndef NATIVE_BEGIN_HOOK
#define NATIVE_BEGIN_HOOK(ctx, key) do { } while (0)
#endif

/* The runtime hook at the end of a walk (bpf/v8.h): may set key->runtime_stack. Default: nothing. */
#ifndef NU_RUNTIME_END
#define NU_RUNTIME_END(key, buffer) do { } while (0)
#endif

HS_NATIVE_VARIABLES
HS_NATIVE_MAPS

#define NATIVE_COMM_WORD 8
#define NATIVE_BUFFER_WORD 10
#define NATIVE_VALUE_WORD 11
_Static_assert(sizeof(struct stack_key) <= NATIVE_COMM_WORD * 8, "stack_key must fit before the comm");
_Static_assert(__builtin_offsetof(struct nu_stack, pcs[NU_STORED_FRAMES]) == NATIVE_STACK_WORDS * 8,
	       "native_stacks values are struct nu_stack up to its NU_STORED_FRAMES addresses");
_Static_assert(NU_MAX_FRAMES - NU_STORED_FRAMES == NATIVE_TAIL_WORDS, "native_tails values are the addresses after");

/* The sample handed from one program to the next through st->ctx_words: its key, comm, buffer word
 * (bit 0: the buffer; the includer may use higher bits) and value. */
static __always_inline void native_ctx_save(struct nu_state *st, const struct stack_key *key, const char *comm,
					    __u64 buffer_word, __u64 value)
{
	__builtin_memcpy(st->ctx_words, key, sizeof(*key));
	__builtin_memcpy(&st->ctx_words[NATIVE_COMM_WORD], comm, COMM_LEN);
	st->ctx_words[NATIVE_BUFFER_WORD] = buffer_word;
	st->ctx_words[NATIVE_VALUE_WORD] = value;
}

/* The key and comm native_ctx_save() left; returns the buffer word. */
static __always_inline __u64 native_ctx_load(const struct nu_state *st, struct stack_key *key, char *comm)
{
	__builtin_memcpy(key, st->ctx_words, sizeof(*key));
	__builtin_memcpy(comm, &st->ctx_words[NATIVE_COMM_WORD], COMM_LEN);
	return st->ctx_words[NATIVE_BUFFER_WORD];
}

/* Begin a walk from user registers and hand it to the step program; 0 if handed over (the step
 * program counts the sample), -1 if the caller must count it itself (key.user_stack_id set). */
static __always_inline int native_begin(void *ctx, struct stack_key *key, const char *comm, __u32 buffer,
					__u64 value, const struct arch_regs *regs)
{
	struct nu_state *st = nu_begin(key->pid, regs);

	key->user_stack_id = -1;
	if (!st)
		return -1;
	native_ctx_save(st, key, comm, buffer, value);
	NATIVE_BEGIN_HOOK(ctx, key);
	bpf_tail_call(ctx, &nu_progs, 0);
	nu_count(NU_STAT_TAIL_CALL_FAILED);
	count_stat(STAT_USTACK_ERROR);
	key->user_stack_id = -2;
	return -1;
}

/* A deep stack's addresses past NU_STORED_FRAMES, in native_tails_<buffer> under its id; where that
 * fails (the map full) userspace finds none and shows the stack cut ([truncated]), counted here. */
static __always_inline void native_store_tail(struct nu_state *st, __u32 id, __u32 buffer)
{
	if (st->stack.n <= NU_STORED_FRAMES)
		return;
	/* (the key in st, not on the BPF stack: the step program with the runtime hooks has 512 bytes
	 * for itself and hs_step, and a key here would be 16 too many) */
	st->tail_id = id;
	if (bpf_map_update_elem(BUFFER_MAP(buffer & 1, native_tails), &st->tail_id, &st->stack.pcs[NU_STORED_FRAMES],
				BPF_ANY))
		nu_count(NU_STAT_TAIL_LOST);
}

/* Store st's stack in native_stacks_<buffer> under a 31-bit id of its hash: key->user_stack_id
 * (its first NU_STORED_FRAMES addresses; the rest in native_tails_<buffer>). */
static __always_inline void native_store(struct nu_state *st, struct stack_key *key, __u32 buffer)
{
	__u64 *stored;     /* struct nu_stack: the hash first */
	__u32 id = (__u32)nu_hash(st) & 0x7fffffff;
	void *stacks = BUFFER_MAP(buffer & 1, native_stacks);

	key->user_stack_id = id;
	/* most samples repeat a stack of the interval: one lookup, where an insert that fails
	 * (the stack is there) and a lookup would be two hash operations */
	stored = bpf_map_lookup_elem(stacks, &id);
	if (!stored) {
		if (bpf_map_update_elem(stacks, &id, &st->stack, BPF_NOEXIST) == 0) {
			native_store_tail(st, id, buffer);
			return;
		}
		stored = bpf_map_lookup_elem(stacks, &id);     /* another CPU stored it first */
	}
	if (!stored) {
		count_stat(STAT_USTACK_ERROR);       /* the map is full */
		key->user_stack_id = -2;
	} else if (stored[0] != st->stack.hash) {
		count_stat(STAT_USTACK_COLLISION);
		key->user_stack_id = -EEXIST;
	}
}

/* The walk of a step program: more frames (tail-calling the step program in nu_progs[0], itself
 * or its variant, until the walk is over), then the stack stored. Returns 0 with `key` (its
 * user_stack_id set), `comm`, `buffer` and `value` as the program that began the walk left them;
 * -1 if there is no walk state. `runtimes` (a constant): the variant that calls the runtime hooks
 * (NU_RUNTIME_FRAME, NU_RUNTIME_JIT_STEP, NU_RUNTIME_END); `deep` (a constant): NU_FRAMES_PER_PROG
 * frames a program, else NU_LIST_FRAMES_PER_PROG (bpf/native_unwind.h). */
static __always_inline int native_step_and_store(void *ctx, struct stack_key *key, char *comm, __u32 *buffer,
						 __u64 *value, int runtimes, int deep)
{
	struct nu_state *st = nu_state();

	if (!st)
		return -1;
	if (!nu_steps(st, runtimes, deep)) {
		bpf_tail_call(ctx, &nu_progs, 0);
		/* past the kernel's last tail call: a walk of the shallow step program cut (marked
		 * truncated), for userspace to put the deep one in its place */
		if (!deep && nu_kernel_vma_walk) {
			nu_count(NU_STAT_SHALLOW_CUT);
			NU_WAKE_USERSPACE();
		}
	}
	nu_count_end(st);
	*buffer = native_ctx_load(st, key, comm) & 1;
	*value = st->ctx_words[NATIVE_VALUE_WORD];
	native_store(st, key, *buffer);
	if (runtimes)
		NU_RUNTIME_END(key, *buffer);
	return 0;
}

/* Where no walk can begin (programs that cannot tail-call the step program: fentry/fexit), the
 * frame-pointer user stack, stored as a native stack so that one map holds every user stack. */
static __always_inline void native_store_fp_stack(void *ctx, struct stack_key *key, __u32 buffer)
{
	struct nu_state *st = nu_state();
	long bytes;
	__u32 i;

	key->user_stack_id = -1;
	if (!st)
		return;
	st->tgid = key->pid;
	st->shared = 0;        /* (no mapping looked up: keyed by address and process) */
	bytes = bpf_get_stack(ctx, st->stack.pcs, sizeof(st->stack.pcs), BPF_F_USER_STACK);
	if (bytes <= 0)
		return;            /* a kernel thread: no user stack */
	st->stack.n = bytes / 8;
	st->stack.end = NU_END_BAD_FP;
	/* hashed by address: its first NU_STORED_FRAMES and its frame count (the kernel's frame-pointer
	 * walks stop at perf_event_max_stack, 127 unless raised) */
	st->ahash = NU_HASH_BASIS;
	for (i = 0; i < NU_STORED_FRAMES; i++) {
		if (i >= st->stack.n)
			break;
		st->ahash = nu_mix(st->ahash, st->stack.pcs[i]);
	}
	native_store(st, key, buffer);
}

/* The body of a step program that counts the sample (on-CPU samples, probe hits). */
static __always_inline int native_step_and_count(void *ctx, int runtimes, int deep)
{
	struct stack_key key;
	char comm[COMM_LEN];
	__u32 buffer;
	__u64 value;

	if (native_step_and_store(ctx, &key, comm, &buffer, &value, runtimes, deep))
		return 0;
	count_stack(&key, comm, value, buffer);
	return 0;
}

/* The user registers of the current task, saved where it entered the kernel (pt_regs at the top
 * of its kernel stack); -1 for a kernel thread, which has no user context. Kernels before 5.15
 * have no bpf_task_pt_regs (the loader makes it return NULL): there the top of the stack is found
 * from task_struct.stack and THREAD_SIZE, and the registers are trusted only if they look like a
 * user context (code and stack segments of ring 3). */
static __always_inline int native_task_user_regs(struct arch_regs *out)
{
	arch_user_regs *regs = (arch_user_regs *)bpf_task_pt_regs((void *)bpf_get_current_task_btf());

	if (!regs && nu_off_task_stack) {
		__u64 stack = nu_kread((__u64)bpf_get_current_task(), nu_off_task_stack);

		if (stack)
			regs = (arch_user_regs *)(stack + nu_thread_size - ARCH_KERNEL_PT_REGS_SIZE);
	}
	if (!regs)
		return -1;
	return arch_regs_read_kernel(out, regs);
}

#endif
