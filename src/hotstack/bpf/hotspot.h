/* SPDX-License-Identifier: GPL-2.0 */
/*
 * HotSpot (Java) frame walker, included by profile.bpf.c: the kernel half of runtimes/hotspot/.
 *
 * The JVM's generated code (template interpreter, C1/C2-compiled methods, stubs) lives in its code
 * cache, anonymous memory without unwind tables, and compiled code uses rbp as an ordinary register
 * (no -XX:+PreserveFramePointer needed here): frame pointers alone cannot walk it. For a process
 * listed in `hs_procs`, the in-kernel unwinder (native_unwind.h) hands every PC in anonymous memory
 * to hs_step() (the NU_RUNTIME_JIT_STEP hook), which walks it the way the JVM walks itself:
 *  - the interpreter's code: by frame pointer (its frames always keep rbp); the Method* is at
 *    fp[-3], the bytecode pointer at fp[-8] (fp[-7] in JDK 8, whose frames have no mirror slot:
 *    hs_proc.interp_bcp), the caller's sp at fp[-1] (frame_x86.hpp, JDK 8-27).
 *    The slot holds the bytecode pointer as of the frame's last call out (a caller's: its call);
 *    the running leaf keeps it in a register (r13), taken from the sample's registers;
 *  - any other code blob: found through its CodeHeap's segment map (one byte per segment, the
 *    distance back towards the block's start; CodeHeap::find_block_for), then stepped by the blob's
 *    frame size: the caller's sp is sp + _frame_size words, the return address just below it and
 *    the saved rbp below that. A blob without a frame size (the call stub) keeps rbp: frame pointer;
 *  - below a thread's entry (the call stub, then libjvm's and libc's thread start): the frames the
 *    unwinder found there last time, while the stack below holds the same bytes (hs_tails).
 * Every Java frame is recorded with its Method* (or the blob, its _method and its _name) and named
 * in userspace from the target's memory. Offsets and the code heaps come from the JVM's vmStructs,
 * read by userspace at attach (runtimes/hotspot/vmstructs.py). Nothing here writes to the target.
 *
 * Transport (bpf/schema.yaml, group hotspot): hs_stacks_<buffer> under a 64-bit hash of what names
 * the frames; that hash is the sample key's `runtime_stack` (0: none).
 */
#ifndef HOTSTACK_HOTSPOT_H
#define HOTSTACK_HOTSPOT_H

#include "schema.h"
#include "runtime_common.h"

int hs_step(__u64 pc, __u32 index);

#include "native_unwind.h"

HS_HOTSPOT_VARIABLES
HS_HOTSPOT_MAPS

#define HS_SEGMAP_HOPS 32          /* 2 hops per 254 segments: blobs up to ~2 MB at 128-byte segments */
#define HS_SEGMAP_FREE 0xff
#define HS_INTERP_SENDER_SP 8      /* below the interpreter's frame pointer, bytes */
#define HS_INTERP_METHOD 24
#define HS_INTERP_BCP 64           /* the farthest bytecode pointer slot (JDK 9 on; JDK 8's: 56) */

static __always_inline void hs_add(__u32 index, __u64 n)
{
	rt_add(&hs_stats, index, n);
}

static __always_inline void hs_count(__u32 index)
{
	hs_add(index, 1);
}

static __always_inline struct hs_stack *hs_scratch_stack(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&hs_scratch, &zero);
}

/* x & mask, with the mask kept: the compiler knows the checks before and would drop it, the verifier
 * does not follow them through the subtraction and needs the mask to bound an index or a
 * read's size (5.10's verifier does not carry a check on x - c back to x) */
#define HS_MASKED(x, mask) ({ __u32 __v = (x); asm volatile("" : "+r"(__v)); __v & (mask); })

/*
 * What a step reads of the target, per CPU (not on the stack: the combined stack of the unwinder's
 * programs is at the kernel's 512-byte limit). Each read is one bpf_probe_read_user, whose fixed cost
 * is most of a frame's: a step reads few, wide spans rather than many fields.
 *  - block: a code block from its header (the used flag) to the last blob field named here;
 *  - words: an interpreter frame from its bytecode pointer to its return address, or a compiled
 *    frame's saved rbp and return address;
 *  - tail: the stack below an entry frame (hs_tail).
 */
#define HS_BLOCK_SPAN 128
#define HS_INTERP_SPAN (HS_INTERP_BCP + 16)   /* bp - 64 .. bp + 16 */
#define HS_TAIL_SPAN 2048                     /* bytes of stack below an entry frame (see hs_tail) */
#define HS_TAIL_FRAMES 32
/* What a step needs of a code blob. */
struct hs_blob {
	__u64 code_begin;
	__u64 name;
	__u64 method;
	__s32 frame_size;
	__s32 complete;
};

struct hs_buffers {
	__u8 block[HS_BLOCK_SPAN];
	__u64 words[HS_INTERP_SPAN / 8];
	__u64 tail[HS_TAIL_SPAN / 8];
	/* the outermost frame-pointer blob stepped in this walk (the call stub of the thread's entry),
	 * a candidate for hs_tails: its frame pointer, pc, stack index, the Java frames recorded up to
	 * it and the unwinder's counters of frames that a cached tail must not hold */
	__u64 cand_bp;
	__u64 cand_pc;
	__u32 cand_index;
	__u32 cand_frames;
	__u64 cand_counters;
	__u32 cand_valid;
	__u32 pad;
	__u64 leaf_bcp;     /* the sample's bytecode pointer register, for a leaf interpreted frame */
	/* the blob of the frame hs_step steps: here, not on the BPF stack, which the step program
	 * with the runtime hooks shares with hs_step (512 bytes for both) */
	struct hs_blob blob;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_buffers);
} hs_buffers SEC(".maps");

#include "hotspot_tails.h"

/* Before a kernel-unwound walk: is the sampled process a listed JVM? Its record is copied per CPU,
 * with the interpreter's bytecode pointer register of the sample (leaf_bcp: 0 if not at hand). */
static __always_inline void hs_begin(__u32 pid, __u64 leaf_bcp)
{
	struct hs_stack *s;
	struct hs_proc *proc, *cur;
	struct hs_buffers *buf;
	__u32 zero = 0;

	if (!hs_walk)
		return;
	s = hs_scratch_stack();
	cur = bpf_map_lookup_elem(&hs_current, &zero);
	if (!s || !cur)
		return;
	if (!RT_BEGIN_WALK(s, proc, &hs_procs, pid))
		return;
	*cur = *proc;
	buf = bpf_map_lookup_elem(&hs_buffers, &zero);
	if (buf) {
		buf->cand_valid = 0;
		buf->leaf_bcp = leaf_bcp;
	}
	hs_count(HS_STAT_WALKS);
}

static __always_inline void hs_record(struct hs_stack *s, __u32 index, __u32 kind, __u64 pc, __u64 method,
				      __u64 extra, __u64 blob)
{
	__u32 n;
	struct hs_frame *f = RT_FRAME_SLOT(s, HS_MAX_FRAMES, n);

	if (!f)
		return;
	f->index = index;
	f->kind = kind;
	f->pc = pc;
	f->method = method;
	f->extra = extra;
	f->blob = blob;
	s->len = n + 1;
}


/*
 * The code block holding pc (CodeHeap::find_block_for), or 0: its segment's entry in the segment
 * map is the distance back towards the block's first segment (0 there, 0xff: free). The map is
 * read HS_SEGMAP_CHUNK bytes at a time, ending at the segment looked up: hops that land in the
 * bytes read (a blob's first 32 segments, 2-4 KB) cost no further read.
 */
static __always_inline __u64 hs_find_block(const struct hs_proc *p, __u64 pc, struct hs_buffers *buf)
{
	const struct hs_heap *h = 0;
	__u64 seg;
	__u8 hop = HS_SEGMAP_FREE;
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
	return h->low + (seg << h->log2_segment);
}

static __always_inline int hs_read(__u64 *out, __u64 addr)
{
	return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
}

/*
 * The code blob in the block at `block` (0 if the block is free, or a read failed) and its fields:
 * the used flag of the block's header, the frame's shape (frame size, frame-complete offset, code
 * begin; from JDK 23 an int16 and an int offset from the blob: p->blob_flags) and what names it
 * (name, method), in one read of HS_BLOCK_SPAN bytes where the offsets
 * allow (JDK 17: the header's flag at 8, the blob's fields up to 120 bytes after the 16-byte
 * header), else field by field.
 */
static __always_inline __u64 hs_read_blob(const struct hs_proc *p, __u64 block, struct hs_buffers *buf,
					  struct hs_blob *out)
{
	__u32 hb = p->heap_block, used = p->block_used, fs = hb + p->blob_frame_size,
	      fc = hb + p->blob_frame_complete, cb = hb + p->blob_code_begin, nm = hb + p->blob_name,
	      me = hb + p->nmethod_method, a;
	__u64 blob = block + hb;
	__u8 flag = 0;

	a = used < fs ? used : fs;
	a = fc < a ? fc : a;
	a = cb < a ? cb : a;
	a = nm < a ? nm : a;
	a = (me < a ? me : a) & ~7U;
	if (!(fs & 3) && !(fc & (p->blob_flags & HS_BLOB_COMPLETE_S16 ? 1 : 3)) &&
	    !(cb & (p->blob_flags & HS_BLOB_CODE_OFFSET ? 3 : 7)) && !((nm | me) & 7) &&
	    used - a <= HS_BLOCK_SPAN - 1 &&
	    fs - a <= HS_BLOCK_SPAN - 4 && fc - a <= HS_BLOCK_SPAN - 4 && cb - a <= HS_BLOCK_SPAN - 8 &&
	    nm - a <= HS_BLOCK_SPAN - 8 && me - a <= HS_BLOCK_SPAN - 8) {
		if (bpf_probe_read_user(buf->block, HS_BLOCK_SPAN, (void *)(block + a)))
			return 0;
		if (!buf->block[HS_MASKED(used - a, HS_BLOCK_SPAN - 1)])
			return 0;
		out->frame_size = *(__s32 *)&buf->block[HS_MASKED(fs - a, HS_BLOCK_SPAN - 4)];
		if (p->blob_flags & HS_BLOB_COMPLETE_S16)
			out->complete = *(__s16 *)&buf->block[HS_MASKED(fc - a, HS_BLOCK_SPAN - 2)];
		else
			out->complete = *(__s32 *)&buf->block[HS_MASKED(fc - a, HS_BLOCK_SPAN - 4)];
		if (p->blob_flags & HS_BLOB_CODE_OFFSET)
			out->code_begin = blob + *(__s32 *)&buf->block[HS_MASKED(cb - a, HS_BLOCK_SPAN - 4)];
		else
			out->code_begin = *(__u64 *)&buf->block[HS_MASKED(cb - a, HS_BLOCK_SPAN - 8)];
		out->name = *(__u64 *)&buf->block[HS_MASKED(nm - a, HS_BLOCK_SPAN - 8)];
		out->method = *(__u64 *)&buf->block[HS_MASKED(me - a, HS_BLOCK_SPAN - 8)];
		return blob;
	}
	if (bpf_probe_read_user(&flag, 1, (void *)(block + used)) || !flag)
		return 0;
	bpf_probe_read_user(&out->frame_size, sizeof(out->frame_size), (void *)(blob + p->blob_frame_size));
	if (p->blob_flags & HS_BLOB_COMPLETE_S16) {
		__s16 complete = 0;

		bpf_probe_read_user(&complete, sizeof(complete), (void *)(blob + p->blob_frame_complete));
		out->complete = complete;
	} else {
		bpf_probe_read_user(&out->complete, sizeof(out->complete), (void *)(blob + p->blob_frame_complete));
	}
	if (p->blob_flags & HS_BLOB_CODE_OFFSET) {
		__s32 offset = 0;

		bpf_probe_read_user(&offset, sizeof(offset), (void *)(blob + p->blob_code_begin));
		out->code_begin = blob + offset;
	} else {
		hs_read(&out->code_begin, blob + p->blob_code_begin);
	}
	hs_read(&out->name, blob + p->blob_name);
	hs_read(&out->method, blob + p->nmethod_method);
	return blob;
}

/*
 * The unwinder's hook for a PC in anonymous executable memory: 1 if it is not the code of a listed
 * JVM (the unwinder goes on with frame pointers), else 0 with the walk's state stepped to the
 * caller, or -1 at the end of the walk (its stack.end says why).
 *
 * A global function: the verifier checks it once, on its own, where a static one was checked again
 * at each of the step program's 5 calls with the caller's state (the program's verification, which
 * the first JVM's samples wait for: 232k -> 72k instructions, 0.29-0.31 -> 0.07-0.09 CPU-s). So it
 * takes scalars only (a pointer argument needs 5.12), and finds the walk's state itself.
 */
/* A frame of the template interpreter (pc in its code), stepped by its frame pointer: recorded
 * with its Method* and bytecode pointer, the caller's sp, rbp and pc read from the frame.
 * Returns 0 to go on, -1 at the end (st->stack.end says why). */
static __always_inline int hs_interpreted_step(struct nu_state *st, struct hs_stack *s, struct hs_buffers *buf,
					       const struct hs_proc *p, __u64 bp, __u64 pc, __u32 index)
{
	__u64 *w = buf->words;      /* (the words in the per-CPU buffer, not on the BPF stack: see hs_buffers) */
	__u64 sender_sp, extra;
	/* the bytecode pointer's word: 0 (fp[-8]), or 1 for JDK 8's fp[-7] */
	__u32 bcp = HS_MASKED((__u32)(HS_INTERP_BCP - p->interp_bcp) / 8, 1);
	int failed = 0;

	if (!bp || (bp & 7) || bp < st->sp || bp - st->sp > (8 << 20)) {
		st->stack.end = NU_END_BAD_FP;
		return -1;
	}
	/* the frame's words from fp[-8] up to the return address, in one read; where
	 * that faults, the words read one by one (a read that faults leaves its word 0) */
	if (bpf_probe_read_user(w, HS_INTERP_SPAN, (void *)(bp - HS_INTERP_BCP))) {
		hs_read(&w[bcp], bp - HS_INTERP_BCP + bcp * 8);
		hs_read(&w[(HS_INTERP_BCP - HS_INTERP_METHOD) / 8], bp - HS_INTERP_METHOD);
		hs_read(&w[(HS_INTERP_BCP - HS_INTERP_SENDER_SP) / 8], bp - HS_INTERP_SENDER_SP);
		failed = hs_read(&w[HS_INTERP_BCP / 8], bp) || hs_read(&w[HS_INTERP_BCP / 8 + 1], bp + 8);
	}
	/* the leaf runs: its slot is as of its last call out, the register is current */
	extra = index == 0 ? buf->leaf_bcp : w[bcp];
	hs_record(s, index, HS_KIND_INTERPRETED, pc, w[(HS_INTERP_BCP - HS_INTERP_METHOD) / 8], extra, 0);
	if (failed) {
		st->stack.end = NU_END_READ;
		return -1;
	}
	/* the caller's own sp: a compiled caller is stepped from it (c2i adapters extend the stack) */
	sender_sp = w[(HS_INTERP_BCP - HS_INTERP_SENDER_SP) / 8];
	if (sender_sp < bp + 16 || sender_sp - bp > (1 << 20))
		sender_sp = bp + 16;
	return nu_to_caller(st, sender_sp, w[HS_INTERP_BCP / 8], w[HS_INTERP_BCP / 8 + 1]);
}

__noinline int hs_step(__u64 pc, __u32 index)
{
	struct nu_state *st = nu_state();
	struct hs_stack *s = hs_scratch_stack();
	struct hs_buffers *buf;
	struct hs_proc *p;
	struct hs_blob *b;
	__u64 bp, caller_sp, blob;
	__u32 zero = 0;

	if (!st || !s || !s->walking)
		return 1;
	p = bpf_map_lookup_elem(&hs_current, &zero);
	if (!p || pc < p->code_low || pc >= p->code_high)
		return 1;
	buf = bpf_map_lookup_elem(&hs_buffers, &zero);
	if (!buf)
		return 1;
	bp = st->bp;
	if (pc >= p->interp_low && pc < p->interp_high)
		return hs_interpreted_step(st, s, buf, p, bp, pc, index);
	b = &buf->blob;
	__builtin_memset(b, 0, sizeof(*b));
	blob = hs_find_block(p, pc, buf);
	if (blob)
		blob = hs_read_blob(p, blob, buf, b);
	if (!blob) {
		hs_count(HS_STAT_NO_BLOB);
		return 1;
	}
	if (b->frame_size <= 0 || b->frame_size > (1 << 16)) {
		/* the call stub and other blobs that keep rbp: walked by frame pointer, unless the
		 * native frames below are this thread's cached tail */
		hs_record(s, index, HS_KIND_BLOB_FP, pc, 0, b->name, blob);
		if (hs_tail_take(st, buf, pc))
			return -1;
		buf->cand_bp = bp;
		buf->cand_pc = pc;
		buf->cand_index = index;
		buf->cand_frames = s->len;
		buf->cand_counters = hs_untabled_frames();
		buf->cand_valid = 1;
		return 1;
	}
	hs_record(s, index, HS_KIND_COMPILED, pc, b->method, b->name, blob);
	if (index == 0 && b->complete > 0 && pc < b->code_begin + b->complete) {
		/* sampled in the prologue, before the frame is built: the return address is at sp */
		if (hs_read(&buf->words[0], st->sp)) {
			st->stack.end = NU_END_READ;
			return -1;
		}
		return nu_to_caller(st, st->sp + 8, bp, buf->words[0]);
	}
	caller_sp = st->sp + (__u64)b->frame_size * 8;
	/* the saved rbp and the return address, just below the caller's sp: one read */
	if (bpf_probe_read_user(buf->words, 16, (void *)(caller_sp - 16))) {
		st->stack.end = NU_END_READ;
		return -1;
	}
	return nu_to_caller(st, caller_sp, buf->words[0], buf->words[1]);
}

/* After the walk: store the recorded frames; their key, or 0 if there are none. Global, like
 * hs_step: checked once, not with each state that the step program's walk ends in. */
__noinline __u64 hs_finish(__u32 buffer)
{
	struct hs_stack *s = 0;
	__u64 hash = RT_HASH_START;
	__u32 i, n = RT_END_WALK(hs_walk, s, hs_scratch_stack(), &hs_stats, HS_STAT_TRUNCATED);

	if (n == 0)
		return 0;
	hs_tail_store(s);
	hs_add(HS_STAT_FRAMES, n < HS_MAX_FRAMES ? n : HS_MAX_FRAMES);
	for (i = 0; i < HS_MAX_FRAMES; i++) {
		struct hs_frame *f;

		if (i >= n)
			break;
		f = &s->frames[i];
		hash = rt_hash(hash, f->method ^ ((__u64)f->index << 48) ^ ((__u64)f->kind << 40));
		/* a compiled frame's pc says which inlined methods and lines run there (its scopes, named in
		 * userspace); an interpreted frame's bytecode pointer, its line */
		hash = rt_hash(hash, f->extra ^ (f->kind == HS_KIND_INTERPRETED ? 0 : f->pc << 1));
	}
	hash = rt_stack_key(hash, n, s->truncated);
	return rt_store_stack(&hs_stacks_0, &hs_stacks_1, buffer, &hash, s, &hs_stats, HS_STAT_STACKS_FULL);
}

#endif /* HOTSTACK_HOTSPOT_H */
