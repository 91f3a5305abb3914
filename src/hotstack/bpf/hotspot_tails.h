/* SPDX-License-Identifier: GPL-2.0 */
/*
 * HotSpot's thread tails (included by hotspot.h, after its buffers): the native frames below a
 * thread's Java entry, cached per thread while the stack there holds the same bytes.
 */
#ifndef HOTSTACK_HOTSPOT_TAILS_H
#define HOTSTACK_HOTSPOT_TAILS_H

/*
 * The native frames below a thread's outermost Java entry (JavaCalls::call_helper ... start_thread,
 * ~8 frames of libjvm and libc) are the same in every sample while the thread runs Java code under
 * that entry, and walking them by their unwind tables is most of a Java sample's cost (a binary
 * search of libjvm's table per frame). hs_tails keeps, per thread, the frames the unwinder found
 * below the last frame-pointer blob it stepped (the call stub) when the walk reached the thread's
 * root with nothing but table rules, with a hash of the stack memory that walk read: from the
 * stub's frame pointer up to the root frame's sp (every return address and saved rbp the rules
 * read lies there). A later walk that steps the same stub at the same frame pointer, in the same
 * address space, and finds the same bytes there would find the same frames: it takes them from the
 * cache and ends. Anything else (other bytes, another depth, a signal or frame-pointer frame below
 * the stub, a longer tail) walks as before. Stacks below a thread's entry that hold Java frames
 * (JNI upcalls) are never cached: the cached tail must be the end of the walk.
 */
struct hs_tail {
	__u64 mm;
	__u64 bp;
	__u64 pc;
	__u64 hash;
	__u32 span;         /* bytes hashed from bp */
	__u32 n;            /* frames in pcs */
	__u64 pcs[HS_TAIL_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);              /* thread id */
	__type(value, struct hs_tail);
} hs_tails SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_tail);
} hs_scratch_tail SEC(".maps");

/* The unwinder's counters of frames that are not table rules, summed (per CPU: this walk's only). */
static __always_inline __u64 hs_nu_counter(__u32 index)
{
	__u64 *v = bpf_map_lookup_elem(&nu_stats, &index);

	return v ? *v : 0;
}

static __always_inline __u64 hs_untabled_frames(void)
{
	return hs_nu_counter(NU_STAT_FP_FRAMES) + hs_nu_counter(NU_STAT_NO_TABLE) +
	       hs_nu_counter(NU_STAT_INVALID_RULE) + hs_nu_counter(NU_STAT_SIGNAL) + hs_nu_counter(NU_STAT_GO_FRAMES);
}

/* A hash of the first `span` bytes of buf->tail (the rest of the buffer masked out: no branch). */
static __always_inline __u64 hs_tail_hash(struct hs_buffers *buf, __u32 span)
{
	__u64 h = RT_HASH_START ^ span;
	__u32 i;

	for (i = 0; i < HS_TAIL_SPAN / 8; i++) {
		__s64 d = (__s64)i * 8 - (__s64)span;

		asm volatile("" : "+r"(d));      /* kept arithmetic: a branch per word would multiply the verifier's paths */
		h = rt_hash(h, buf->tail[i] & (__u64)(d >> 63));   /* all ones while i * 8 < span */
		h ^= h >> 29;
	}
	return h;
}

/* Read the span bytes of stack at bp into buf->tail; 0 if read. */
static __always_inline int hs_tail_read(struct hs_buffers *buf, __u64 bp, __u32 span)
{
	if (span < 16 || span >= HS_TAIL_SPAN)
		return -1;
	return bpf_probe_read_user(buf->tail, HS_MASKED(span, HS_TAIL_SPAN - 1), (void *)bp);
}

/* At a frame-pointer blob: the cached tail of the walk, if it still holds; 1 if taken (walk over). */
static __always_inline int hs_tail_take(struct nu_state *st, struct hs_buffers *buf, __u64 pc)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), n = st->stack.n, m, i;
	struct hs_tail *t = bpf_map_lookup_elem(&hs_tails, &tid);
	__u64 bp = st->bp;

	if (!t || t->bp != bp || t->pc != pc || t->mm != st->mm || !t->n || t->n > HS_TAIL_FRAMES)
		return 0;
	m = t->n;
	if (n + m > NU_MAX_FRAMES || hs_tail_read(buf, bp, t->span) || hs_tail_hash(buf, t->span) != t->hash)
		return 0;
	for (i = 0; i < HS_TAIL_FRAMES; i++) {
		if (i >= m)
			break;
		st->stack.pcs[(n + i) & (NU_MAX_FRAMES - 1)] = t->pcs[i];
	}
	st->stack.n = n + m;
	st->stack.end = NU_END_ROOT;
	st->shared = 0;        /* frames not looked up (the JIT frames above had made it so already) */
	return 1;
}

/* After a walk that ended at the thread's root: cache the frames below its candidate stub. */
static __always_inline void hs_tail_store(struct hs_stack *s)
{
	struct hs_buffers *buf = bpf_map_lookup_elem(&hs_buffers, &(__u32){ 0 });
	struct nu_state *st = nu_state();
	struct hs_tail *t;
	__u32 tid, first, m, span, i;

	if (!buf || !st || !buf->cand_valid || st->stack.end != NU_END_ROOT || s->len != buf->cand_frames)
		return;
	/* only the stub's own frame-pointer step since the candidate: the rest were table rules */
	if (hs_untabled_frames() != buf->cand_counters + 1)
		return;
	first = buf->cand_index + 1;
	if (first >= st->stack.n || st->stack.n - first > HS_TAIL_FRAMES || st->sp <= buf->cand_bp ||
	    st->sp - buf->cand_bp >= HS_TAIL_SPAN)
		return;
	m = st->stack.n - first;
	span = st->sp - buf->cand_bp;
	if (hs_tail_read(buf, buf->cand_bp, span))
		return;
	tid = (__u32)bpf_get_current_pid_tgid();
	t = bpf_map_lookup_elem(&hs_scratch_tail, &(__u32){ 0 });
	if (!t)
		return;
	t->mm = st->mm;
	t->bp = buf->cand_bp;
	t->pc = buf->cand_pc;
	t->span = span;
	t->hash = hs_tail_hash(buf, span);
	t->n = m;
	for (i = 0; i < HS_TAIL_FRAMES; i++) {
		if (i >= m)
			break;
		t->pcs[i] = st->stack.pcs[(first + i) & (NU_MAX_FRAMES - 1)];
	}
	bpf_map_update_elem(&hs_tails, &tid, t, BPF_ANY);
}

#endif /* HOTSTACK_HOTSPOT_TAILS_H */
