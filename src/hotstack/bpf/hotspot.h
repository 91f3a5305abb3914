/* SPDX-License-Identifier: GPL-2.0 */
/*
 * HotSpot (Java) frame walker, included by profile.bpf.c: the kernel half of unwind/hotspot/.
 *
 * The JVM's generated code (template interpreter, C1/C2-compiled methods, stubs) lives in its code
 * cache, anonymous memory without unwind tables, and compiled code uses rbp as an ordinary register
 * (no -XX:+PreserveFramePointer needed here): frame pointers alone cannot walk it. For a process
 * listed in `hs_procs`, the in-kernel unwinder (native_unwind.h) hands every PC in anonymous memory
 * to hs_step() (the NU_RUNTIME_JIT_STEP hook), which walks it the way the JVM walks itself:
 *  - the interpreter's code: by frame pointer (its frames always keep rbp); the Method* is at
 *    fp[-3], the bytecode pointer at fp[-8], the caller's sp at fp[-1] (frame_x86.hpp, JDK 8-25);
 *  - any other code blob: found through its CodeHeap's segment map (one byte per segment, the
 *    distance back towards the block's start; CodeHeap::find_block_for), then stepped by the blob's
 *    frame size: the caller's sp is sp + _frame_size words, the return address just below it and
 *    the saved rbp below that. A blob without a frame size (the call stub) keeps rbp: frame pointer.
 * Every Java frame is recorded with its Method* (or the blob, its _method and its _name) and named
 * in userspace from the target's memory. Offsets and the code heaps come from the JVM's vmStructs,
 * read by userspace at attach (unwind/hotspot/vmstructs.py). Nothing here writes to the target.
 *
 * Transport (bpf/schema.yaml, group hotspot): hs_stacks_<buffer> under a 64-bit hash of what names
 * the frames; that hash is the sample key's `runtime_stack` (0: none).
 */
#ifndef HOTSTACK_HOTSPOT_H
#define HOTSTACK_HOTSPOT_H

#include "schema.h"

struct nu_state;
static int hs_step(struct nu_state *st, __u64 pc, __u32 index);

#include "native_unwind.h"

HS_HOTSPOT_VARIABLES
HS_HOTSPOT_MAPS

#define HS_SEGMAP_HOPS 32          /* 2 hops per 254 segments: blobs up to ~2 MB at 128-byte segments */
#define HS_SEGMAP_FREE 0xff
#define HS_INTERP_SENDER_SP 8      /* below the interpreter's frame pointer, bytes */
#define HS_INTERP_METHOD 24
#define HS_INTERP_BCP 64

static __always_inline void hs_count(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&hs_stats, &index);

	if (value)
		*value += 1;
}

static __always_inline struct hs_stack *hs_scratch_stack(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&hs_scratch, &zero);
}

/* Before a kernel-unwound walk: is the sampled process a listed JVM? Its record is copied per CPU. */
static __always_inline void hs_begin(__u32 pid)
{
	struct hs_stack *s;
	struct hs_proc *proc, *cur;
	__u32 zero = 0;

	if (!hs_walk)
		return;
	s = hs_scratch_stack();
	cur = bpf_map_lookup_elem(&hs_current, &zero);
	if (!s || !cur)
		return;
	proc = bpf_map_lookup_elem(&hs_procs, &pid);
	s->len = 0;
	s->truncated = 0;
	s->walking = proc != 0;
	if (!proc)
		return;
	s->pid = pid;
	*cur = *proc;
	hs_count(HS_STAT_WALKS);
}

static __always_inline void hs_record(struct hs_stack *s, __u32 index, __u32 kind, __u64 pc, __u64 method,
				      __u64 extra, __u64 blob)
{
	struct hs_frame *f;
	__u32 n = s->len;

	if (n >= HS_MAX_FRAMES) {
		s->truncated = 1;
		return;
	}
	f = &s->frames[n];
	f->index = index;
	f->kind = kind;
	f->pc = pc;
	f->method = method;
	f->extra = extra;
	f->blob = blob;
	s->len = n + 1;
}

/* The CodeBlob holding pc (CodeHeap::find_blob), or 0. */
static __always_inline __u64 hs_find_blob(const struct hs_proc *p, __u64 pc)
{
	const struct hs_heap *h = 0;
	__u64 seg, block;
	__u8 hop = HS_SEGMAP_FREE, used = 0;
	__u32 i;

	for (i = 0; i < HS_MAX_HEAPS; i++) {
		if (p->heaps[i].low <= pc && pc < p->heaps[i].high) {
			h = &p->heaps[i];
			break;
		}
	}
	if (!h || h->log2_segment > 20)
		return 0;
	seg = (pc - h->low) >> h->log2_segment;
	for (i = 0; i < HS_SEGMAP_HOPS; i++) {
		if (bpf_probe_read_user(&hop, 1, (void *)(h->segmap + seg)) || hop == HS_SEGMAP_FREE)
			return 0;
		if (hop == 0)
			break;
		seg -= hop;
	}
	if (hop != 0)
		return 0;
	block = h->low + (seg << h->log2_segment);
	if (bpf_probe_read_user(&used, 1, (void *)(block + p->block_used)) || !used)
		return 0;
	return block + p->heap_block;
}

static __always_inline int hs_read(__u64 *out, __u64 addr)
{
	return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
}

/*
 * The five fields of a code blob that a step needs, in two reads of HS_BLOB_SPAN bytes instead of
 * five (one read is most of a compiled frame's cost): the frame's shape (frame size, frame-complete
 * offset, code begin: JDK 17 offsets 20-39) and what names it (name, method: 96-119). 0 if read,
 * else (fields further apart, unaligned, or a read failed) the caller reads them one by one. Small
 * on purpose: the combined stack of the unwinder's programs is at the kernel's 512-byte limit.
 */
#define HS_BLOB_SPAN 32
/* x & mask, with the mask kept: the compiler knows the checks above and would drop it, the verifier
 * does not follow them through the subtraction and needs the mask to bound a stack index */
#define HS_MASKED(x, mask) ({ __u32 __v = (x); asm volatile("" : "+r"(__v)); __v & (mask); })
static __always_inline int hs_read_blob(const struct hs_proc *p, __u64 blob, __s32 *frame_size, __s32 *complete,
					__u64 *code_begin, __u64 *name, __u64 *method)
{
	__u64 shape[HS_BLOB_SPAN / 8], names[HS_BLOB_SPAN / 8];
	__u32 fs = p->blob_frame_size, fc = p->blob_frame_complete, cb = p->blob_code_begin, nm = p->blob_name,
	      me = p->nmethod_method, a, b;

	if ((fs | fc) & 3 || (cb | nm | me) & 7)
		return -1;
	a = (fs < fc ? fs : fc) & ~7U;
	a = cb < a ? cb : a;
	b = nm < me ? nm : me;
	if (fs - a > HS_BLOB_SPAN - 4 || fc - a > HS_BLOB_SPAN - 4 || cb - a > HS_BLOB_SPAN - 8 ||
	    nm - b > HS_BLOB_SPAN - 8 || me - b > HS_BLOB_SPAN - 8)
		return -1;
	if (bpf_probe_read_user(shape, sizeof(shape), (void *)(blob + a)) ||
	    bpf_probe_read_user(names, sizeof(names), (void *)(blob + b)))
		return -1;
	*frame_size = ((__s32 *)shape)[HS_MASKED((fs - a) / 4, HS_BLOB_SPAN / 4 - 1)];
	*complete = ((__s32 *)shape)[HS_MASKED((fc - a) / 4, HS_BLOB_SPAN / 4 - 1)];
	*code_begin = shape[HS_MASKED((cb - a) / 8, HS_BLOB_SPAN / 8 - 1)];
	*name = names[HS_MASKED((nm - b) / 8, HS_BLOB_SPAN / 8 - 1)];
	*method = names[HS_MASKED((me - b) / 8, HS_BLOB_SPAN / 8 - 1)];
	return 0;
}

/*
 * The unwinder's hook for a PC in anonymous executable memory: 1 if it is not the code of a listed
 * JVM (the unwinder goes on with frame pointers), else 0 with st stepped to the caller, or -1 at
 * the end of the walk (st->stack.end says why).
 */
static __noinline int hs_step(struct nu_state *st, __u64 pc, __u32 index)
{
	struct hs_stack *s = hs_scratch_stack();
	struct hs_proc *p;
	__u64 bp, next_bp = 0, ra = 0, sender_sp = 0, method = 0, extra = 0, blob, name = 0, code_begin = 0;
	__s32 frame_size = 0, complete = 0;
	__u32 zero = 0;

	if (!s || !s->walking)
		return 1;
	p = bpf_map_lookup_elem(&hs_current, &zero);
	if (!p || pc < p->code_low || pc >= p->code_high)
		return 1;
	bp = st->bp;
	if (pc >= p->interp_low && pc < p->interp_high) {
		if (!bp || (bp & 7) || bp < st->sp || bp - st->sp > (8 << 20)) {
			st->stack.end = NU_END_BAD_FP;
			return -1;
		}
		hs_read(&method, bp - HS_INTERP_METHOD);
		hs_read(&extra, bp - HS_INTERP_BCP);
		hs_record(s, index, HS_KIND_INTERPRETED, pc, method, extra, 0);
		if (hs_read(&next_bp, bp) || hs_read(&ra, bp + 8)) {
			st->stack.end = NU_END_READ;
			return -1;
		}
		/* the caller's own sp: a compiled caller is stepped from it (c2i adapters extend the stack) */
		hs_read(&sender_sp, bp - HS_INTERP_SENDER_SP);
		if (sender_sp < bp + 16 || sender_sp - bp > (1 << 20))
			sender_sp = bp + 16;
		st->sp = sender_sp;
		st->bp = next_bp;
		st->pc = ra;
		st->signal = 0;
		if (!ra) {
			st->stack.end = NU_END_ZERO;
			return -1;
		}
		return 0;
	}
	blob = hs_find_blob(p, pc);
	if (!blob) {
		hs_count(HS_STAT_NO_BLOB);
		return 1;
	}
	if (hs_read_blob(p, blob, &frame_size, &complete, &code_begin, &name, &method)) {
		bpf_probe_read_user(&frame_size, sizeof(frame_size), (void *)(blob + p->blob_frame_size));
		bpf_probe_read_user(&complete, sizeof(complete), (void *)(blob + p->blob_frame_complete));
		hs_read(&code_begin, blob + p->blob_code_begin);
		hs_read(&name, blob + p->blob_name);
		hs_read(&method, blob + p->nmethod_method);
	}
	if (frame_size <= 0 || frame_size > (1 << 16)) {
		/* the call stub and other blobs that keep rbp: walked by frame pointer */
		hs_record(s, index, HS_KIND_BLOB_FP, pc, 0, name, blob);
		return 1;
	}
	hs_record(s, index, HS_KIND_COMPILED, pc, method, name, blob);
	if (index == 0 && complete > 0 && pc < code_begin + complete) {
		/* sampled in the prologue, before the frame is built: the return address is at sp */
		if (hs_read(&ra, st->sp)) {
			st->stack.end = NU_END_READ;
			return -1;
		}
		st->sp += 8;
	} else {
		__u64 caller_sp = st->sp + (__u64)frame_size * 8;

		if (hs_read(&ra, caller_sp - 8) || hs_read(&next_bp, caller_sp - 16)) {
			st->stack.end = NU_END_READ;
			return -1;
		}
		st->sp = caller_sp;
		st->bp = next_bp;
	}
	st->pc = ra;
	st->signal = 0;
	if (!ra) {
		st->stack.end = NU_END_ZERO;
		return -1;
	}
	return 0;
}

/* After the walk: store the recorded frames; their key, or 0 if there are none. */
static __always_inline __u64 hs_finish(__u32 buffer)
{
	struct hs_stack *s;
	__u64 hash = 0xcbf29ce484222325ULL;
	void *stacks;
	__u32 i, n;

	if (!hs_walk)
		return 0;
	s = hs_scratch_stack();
	if (!s || !s->walking)
		return 0;
	s->walking = 0;
	n = s->len;
	if (n == 0)
		return 0;
	if (s->truncated)
		hs_count(HS_STAT_TRUNCATED);
	for (i = 0; i < HS_MAX_FRAMES; i++) {
		struct hs_frame *f;

		if (i >= n)
			break;
		f = &s->frames[i];
		hs_count(HS_STAT_FRAMES);
		hash = (hash ^ f->method ^ ((__u64)f->index << 48) ^ ((__u64)f->kind << 40)) * 0x100000001b3ULL;
		/* a compiled frame's pc says which inlined methods run there (its scopes, named in userspace) */
		hash = (hash ^ (f->kind == HS_KIND_INTERPRETED ? 0 : f->extra ^ (f->pc << 1))) * 0x100000001b3ULL;
	}
	hash = (hash ^ n ^ ((__u64)s->truncated << 32)) | 1;   /* never 0: 0 means "no Java frames" */
	stacks = buffer ? (void *)&hs_stacks_1 : (void *)&hs_stacks_0;
	if (bpf_map_lookup_elem(stacks, &hash))
		return hash;
	if (bpf_map_update_elem(stacks, &hash, s, BPF_ANY)) {
		hs_count(HS_STAT_STACKS_FULL);
		return 0;
	}
	return hash;
}

#endif /* HOTSTACK_HOTSPOT_H */
