/* SPDX-License-Identifier: GPL-2.0 */
/*
 * V8 (Node.js) frame recorder, included by profile.bpf.c: the kernel half of runtimes/v8/.
 *
 * V8's generated code (JIT code in anonymous memory, and the builtins embedded in the `node`
 * binary, which have no unwind tables) keeps rbp frame pointers, so the in-kernel unwinder
 * (native_unwind.h) walks it with frame pointers already. What it cannot do is name it: for a
 * process listed in `v8_procs`, each frame the unwinder walks with frame pointers calls
 * v8_frame(), which records the two words below the frame pointer that say what the frame is:
 * the JSFunction (fp - off_function) and the context, or for a non-JavaScript frame a Smi
 * frame-type marker (fp - off_marker); and the two that give an interpreted frame's line: its
 * BytecodeArray and bytecode offset (a Smi; in a baseline frame that slot holds the feedback
 * vector). A compiled frame's line is its pc's, already recorded. The leaf frame also gets the
 * interpreter's bytecode offset register (ARCH_REGS_V8_BCO): a bytecode handler keeps the offset
 * there, and the frame's slot holds it only from the last call out; and the words at the stack
 * pointer, where a leaf without a frame (a builtin that baseline code calls) keeps the return
 * address into its caller, whose frame the unwinder then walks with the builtin's pc. Offsets come from V8's own
 * post-mortem metadata (the v8dbg_* symbols of the binary, read by userspace). Userspace names
 * the functions and their lines later from the target's memory; nothing here writes to the target.
 *
 * Transport (bpf/schema.yaml, group v8): the frames go into v8_stacks_<buffer> under a 64-bit hash
 * of what names them, and that hash is the sample key's `runtime_stack` (0: none).
 */
#ifndef HOTSTACK_V8_H
#define HOTSTACK_V8_H

#include "schema.h"
#include "runtime_common.h"

HS_V8_VARIABLES
HS_V8_MAPS

static __always_inline void v8_count(__u32 index)
{
	rt_add(&v8_stats, index, 1);
}

/* leaf_word0..3 of struct v8_stack, read as one array */
#define V8_LEAF_WORDS 4
_Static_assert(__builtin_offsetof(struct v8_stack, leaf_word3) ==
	       __builtin_offsetof(struct v8_stack, leaf_word0) + (V8_LEAF_WORDS - 1) * sizeof(__u64),
	       "the leaf words are one array");

static __always_inline struct v8_stack *v8_scratch_stack(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&v8_scratch, &zero);
}

/* Before a kernel-unwound walk: is the sampled process one to record V8 frames for? live_offset:
 * the interpreter's bytecode offset register at the sample (0: not at hand); sp: the stack
 * pointer, whose first words hold the return address of a leaf that has no frame of its own. */
static __always_inline void v8_begin(__u32 pid, __u64 live_offset, __u64 sp)
{
	struct v8_stack *s;
	const struct v8_proc *proc;

	if (!v8_walk)
		return;
	s = v8_scratch_stack();
	if (!s)
		return;
	if (!RT_BEGIN_WALK(s, proc, &v8_procs, pid))
		return;
	s->off_function = proc->off_function;
	s->off_marker = proc->off_marker;
	s->off_bytecode_array = proc->off_bytecode_array;
	s->off_bytecode_offset = proc->off_bytecode_offset;
	s->live_offset = live_offset;
	s->leaf_word0 = s->leaf_word1 = s->leaf_word2 = s->leaf_word3 = 0;
	bpf_probe_read_user(&s->leaf_word0, V8_LEAF_WORDS * sizeof(__u64), (void *)sp);
	v8_count(V8_STAT_WALKS);
}

/* The unwinder's runtime hook: frame `index` at `pc` is walked with frame pointer `fp`. Global,
 * so that the verifier checks it once and not at each of the step program's calls (hs_step in
 * bpf/hotspot.h); it returns 0 (a global function returns a scalar). */
__noinline int v8_frame(__u64 pc, __u64 fp, __u32 index)
{
	struct v8_stack *s = v8_scratch_stack();
	struct v8_frame *f;
	__u32 n;

	if (!s || !s->walking || !fp)
		return 0;
	f = RT_FRAME_SLOT(s, V8_MAX_FRAMES, n);
	if (!f)
		return 0;
	f->index = index;
	f->pc = pc;
	f->function = 0;
	f->marker = 0;
	f->bytecode_array = 0;
	f->bytecode_offset = 0;
	f->live_offset = index == 0 ? s->live_offset : 0;
	bpf_probe_read_user(&f->function, sizeof(f->function), (void *)(fp - s->off_function));
	bpf_probe_read_user(&f->marker, sizeof(f->marker), (void *)(fp - s->off_marker));
	if (s->off_bytecode_array) {
		bpf_probe_read_user(&f->bytecode_array, sizeof(f->bytecode_array), (void *)(fp - s->off_bytecode_array));
		bpf_probe_read_user(&f->bytecode_offset, sizeof(f->bytecode_offset),
				    (void *)(fp - s->off_bytecode_offset));
	}
	s->len = n + 1;
	return 0;
}

/* After the walk: store the recorded frames; their key, or 0 if there are none. Global, like
 * v8_frame: checked once, not with each state that the step program's walk ends in. */
__noinline __u64 v8_finish(__u32 buffer)
{
	struct v8_stack *s = 0;
	__u64 hash = RT_HASH_START;
	__u32 i, n = RT_END_WALK(v8_walk, s, v8_scratch_stack(), &v8_stats, V8_STAT_TRUNCATED);

	if (n == 0)
		return 0;
	if (s->frames[0].index != 0) {
		/* the leaf is not a V8 frame: the stack top says nothing of one (and would only make
		 * stacks that differ by it) */
		s->leaf_word0 = s->leaf_word1 = s->leaf_word2 = s->leaf_word3 = 0;
	}
	for (i = 0; i < V8_MAX_FRAMES; i++) {
		struct v8_frame *f;

		if (i >= n)
			break;
		f = &s->frames[i];
		v8_count(V8_STAT_FRAMES);
		hash = rt_hash(hash, f->function ^ ((__u64)f->index << 48));
		hash = rt_hash(hash, f->marker);
		/* what gives the frame's line: its pc, bytecode offset, and the leaf's register */
		hash = rt_hash(hash, f->pc);
		hash = rt_hash(hash, f->bytecode_offset ^ (f->live_offset << 16));
	}
	hash = rt_hash(hash, s->leaf_word0 ^ (s->leaf_word1 << 7));
	hash = rt_hash(hash, s->leaf_word2 ^ (s->leaf_word3 << 7));
	hash = rt_stack_key(hash, n, s->truncated);
	return rt_store_stack(&v8_stacks_0, &v8_stacks_1, buffer, &hash, s, &v8_stats, V8_STAT_STACKS_FULL);
}

#endif /* HOTSTACK_V8_H */
