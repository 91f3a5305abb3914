/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every stack-counting program shares: two buffers of counts and stack maps
 * (the program writes into the one named by `active_buffer`; userspace flips it,
 * waits for programs in flight, then drains the other), and the pid filter.
 */
#ifndef HOTSTACK_BUFFERS_H
#define HOTSTACK_BUFFERS_H

#define MAX_STACK_DEPTH 127

const volatile __u32 filter_by_pid = 0;

/* Which of the two buffers the programs write to (0 or 1); set by userspace. */
volatile __u32 active_buffer = 0;

#define COUNTS_MAP(name, key_type, value_type)            \
	struct {                                          \
		__uint(type, BPF_MAP_TYPE_HASH);          \
		__uint(max_entries, 16384);               \
		__type(key, key_type);                    \
		__type(value, value_type);                \
	} name SEC(".maps")

/*
 * Stack maps are hash tables that refuse a stack whose bucket is taken (counted
 * as a collision), so they lose stacks long before they are full: size them for
 * the number of distinct stacks an interval sees.
 */
#define STACK_MAP(name, entries)                          \
	struct {                                          \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);   \
		__uint(max_entries, entries);             \
		__uint(key_size, sizeof(__u32));          \
		__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64)); \
	} name SEC(".maps")

/* The map of the given buffer: BUFFER_MAP(buffer, counts) is &counts_0 or &counts_1. */
#define BUFFER_MAP(buffer, name) ((buffer) ? (void *)&name##_1 : (void *)&name##_0)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} filter_pids SEC(".maps");

#endif
