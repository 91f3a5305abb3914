/* libswap_b.so for swap_libs.c: b_hot first (where libswap_a.so has a_pad), then b_pad. */
#include <time.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void b_hot(double seconds)
{
	double end = now() + seconds;

	while (now() < end)
		for (int i = 0; i < 100000; i++)
			sink += i ^ 5;
}

__attribute__((noinline)) void b_pad(void)
{
	for (int i = 0; i < 100; i++)
		sink += i * 7;
}
