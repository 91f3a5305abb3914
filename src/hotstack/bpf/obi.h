/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Trace/span correlation with OpenTelemetry eBPF Instrumentation (OBI, Beyla).
 *
 * OBI keeps the span each thread is serving in a pinned map, `traces_ctx_v1`
 * (<bpffs>/otel/traces_ctx_v1): key = bpf_get_current_pid_tgid() of the thread,
 * value = trace id (16 bytes) + span id (8 bytes) (struct trace_context). When userspace
 * finds the pin, it loads our programs with that map in place of our placeholder (shrunk to
 * one entry otherwise) and sets `obi_enabled`; samples then carry the span their thread was in.
 */
#ifndef HOTSTACK_OBI_H
#define HOTSTACK_OBI_H

#include "schema.h"

HS_OBI_VARIABLES
HS_OBI_MAPS

/* Fill `out` with the current thread's span, if OBI knows one (else leave it zero). */
static __always_inline void obi_trace_context(__u64 pid_tgid, struct trace_context *out)
{
	struct trace_context *found;

	if (!obi_enabled)
		return;
	found = bpf_map_lookup_elem(&traces_ctx_v1, &pid_tgid);
	if (found)
		__builtin_memcpy(out, found, sizeof(*out));
}

#endif
