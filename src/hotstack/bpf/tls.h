/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Thread-local variables of the sampled thread, for the interpreter walkers (ruby.h, perl.h).
 *
 * The thread pointer is task_struct.thread.fsbase (its offset comes from the kernel's BTF, set by
 * userspace as each walker's tunable). A variable in static TLS (the executable, or TLSDESC /
 * TPOFF64 relocations) sits at a fixed offset from it; one of a shared library built for the
 * general-dynamic model sits in its module's block, found through the DTV (x86-64 glibc: the
 * thread pointer's second word; entries of `dtv_entry` bytes, indexed by module id).
 */
#ifndef HOTSTACK_TLS_H
#define HOTSTACK_TLS_H

#include "runtime_common.h"

/* The sampled thread's thread pointer, 0 if unknown. */
static __always_inline __u64 tls_thread_pointer(__u64 fsbase_offset)
{
	void *task = (void *)bpf_get_current_task();
	__u64 fsbase = 0;

	if (!fsbase_offset || bpf_probe_read_kernel(&fsbase, sizeof(fsbase), task + fsbase_offset))
		return 0;
	return fsbase;
}

/* The value of a pointer-sized thread-local variable: in static TLS at `offset` from the thread
 * pointer (module 0), or at `offset` in module `module`'s block; 0 if the thread has none yet. */
static __always_inline __u64 tls_read_variable(__u64 fsbase_offset, __u32 module, __u16 dtv_entry, __s64 offset)
{
	__u64 tp = tls_thread_pointer(fsbase_offset), block;

	if (!tp)
		return 0;
	if (!module)
		return rt_read_u64(tp + offset);
	block = rt_read_u64(rt_read_u64(tp + 8) + (__u64)module * dtv_entry);
	if (!block || block == (__u64)-1)   /* not allocated in this thread yet */
		return 0;
	return rt_read_u64(block + offset);
}

#endif /* HOTSTACK_TLS_H */
