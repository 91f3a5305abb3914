/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every runtime's frame recorder shares (python.h, ruby.h, php.h, perl.h, v8.h, hotspot.h):
 * its per-CPU counters, a read of one word of the target, the FNV-1a hash of what names the
 * recorded frames, and the store of a recorded stack under that hash in the map of the active
 * buffer (<runtime>_stacks_<buffer>), whose key becomes the sample key's `runtime_stack`.
 */
#ifndef HOTSTACK_RUNTIME_COMMON_H
#define HOTSTACK_RUNTIME_COMMON_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define RT_HASH_START 0xcbf29ce484222325ULL   /* FNV-1a's offset basis */
#define RT_HASH_PRIME 0x100000001b3ULL

/* One FNV-1a step over a 64-bit word. */
static __always_inline __u64 rt_hash(__u64 hash, __u64 word)
{
	return (hash ^ word) * RT_HASH_PRIME;
}

/* Add n to counter `index` of a runtime's per-CPU counters map (<runtime>_stats). */
static __always_inline void rt_add(void *counters, __u32 index, __u64 n)
{
	__u64 *value = bpf_map_lookup_elem(counters, &index);

	if (value)
		*value += n;
}

/* A word of the target at addr; 0 if it cannot be read. */
static __always_inline __u64 rt_read_u64(__u64 addr)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		return 0;
	return v;
}

/* The key of a recorded stack: the hash of its frames closed with their number and whether the
 * walk was cut; never 0, which means "no runtime stack". */
static __always_inline __u64 rt_stack_key(__u64 hash, __u32 n, __u32 truncated)
{
	return (hash ^ n ^ ((__u64)truncated << 32)) | 1;
}

/* Store `stack` under *key in this buffer's stacks map (one of stacks_0/stacks_1), unless the same
 * stack is there already; returns *key, or 0 when the map is full (counted as full_counter). The
 * key is the caller's variable, on the BPF stack since its hash loop: a copy of it here would cost
 * the verifier more states in PHP's walker (+3%). */
static __always_inline __u64 rt_store_stack(void *stacks_0, void *stacks_1, __u32 buffer, __u64 *key,
					    const void *stack, void *counters, __u32 full_counter)
{
	void *stacks = buffer ? stacks_1 : stacks_0;

	if (bpf_map_lookup_elem(stacks, key))
		return *key;
	if (bpf_map_update_elem(stacks, key, stack, BPF_ANY)) {
		rt_add(counters, full_counter, 1);
		return 0;
	}
	return *key;
}

/* Before a kernel-unwound walk that a runtime hook records frames in (v8.h, hotspot.h): `proc` set
 * to pid's record in the runtime's `procs` map (NULL: not a process it records) and the hook's
 * `stack` emptied, walking for such a process only. True for such a process. */
#define RT_BEGIN_WALK(stack, proc, procs, pid)                                                      \
	({                                                                                          \
		(proc) = bpf_map_lookup_elem(procs, &(pid));                                        \
		(stack)->len = 0;                                                                   \
		(stack)->truncated = 0;                                                             \
		(stack)->walking = (proc) != 0;                                                     \
		if (proc)                                                                           \
			(stack)->pid = (pid);                                                       \
		(proc) != 0;                                                                        \
	})

/* The slot of the next frame a runtime hook records in `stack` (`max` frames), NULL once it is full
 * (the walk is then cut: `truncated`); `n`: the frames recorded before it. The hook fills the slot,
 * then counts it (stack->len = n + 1). */
#define RT_FRAME_SLOT(stack, max, n)                                                               \
	({                                                                                          \
		__typeof__(&(stack)->frames[0]) __f = 0;                                            \
		(n) = (stack)->len;                                                                 \
		if ((n) >= (max))                                                                   \
			(stack)->truncated = 1;                                                     \
		else                                                                                \
			__f = &(stack)->frames[n];                                                  \
		__f;                                                                                \
	})

/* At the end of a kernel-unwound walk that a runtime hook recorded frames in (v8.h, hotspot.h):
 * `stack` set to the hook's stack (`scratch`, looked up only if the runtime is on) and its walk
 * ended; the number of frames recorded, 0 if the runtime is off (`on` 0) or the sample's process
 * is not one it records (`walking` unset). A walk cut at the stack's size is counted
 * (`counters`[`truncated_counter`]). */
#define RT_END_WALK(on, stack, scratch, counters, truncated_counter)                               \
	({                                                                                          \
		__u32 __n = 0;                                                                      \
		if (on) {                                                                           \
			(stack) = (scratch);                                                        \
			if ((stack) && (stack)->walking) {                                          \
				(stack)->walking = 0;                                               \
				__n = (stack)->len;                                                 \
				if (__n && (stack)->truncated)                                      \
					rt_add(counters, truncated_counter, 1);                     \
			}                                                                           \
		}                                                                                   \
		__n;                                                                                \
	})

#endif /* HOTSTACK_RUNTIME_COMMON_H */
