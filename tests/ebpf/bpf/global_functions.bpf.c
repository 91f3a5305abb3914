/* Global functions for the loader's tests (tests/ebpf/test_global_functions.py): one that takes
 * scalars, which the loader describes to the verifier, and one that takes a pointer, which it
 * refuses with a clear error (built with -DWITH_POINTER). Built by the test with clang. */
#include <linux/types.h>
#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#define __noinline __attribute__((noinline))

static long (*bpf_get_smp_processor_id)(void) = (void *)8;

__noinline int add_scaled(__u64 a, __u32 b, int c)
{
	return (int)(a * 3 + b + c);
}

#ifdef WITH_POINTER
__noinline int first_word(__u64 *p)
{
	return p ? (int)*p : 0;
}
#endif

SEC("perf_event")
int calls_scalars(void *ctx)
{
	return add_scaled(bpf_get_smp_processor_id(), 2, 1) > 0;
}

#ifdef WITH_POINTER
SEC("perf_event")
int calls_pointer(void *ctx)
{
	__u64 word = bpf_get_smp_processor_id();

	return first_word(&word);
}
#endif

char LICENSE[] SEC("license") = "GPL";
