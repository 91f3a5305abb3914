/* libswap_a.so for swap_libs.c: a_pad first, then a_hot. */
#include <time.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void a_pad(void)
{
	for (int i = 0; i < 100; i++)
		sink += i * 3;
}

__attribute__((noinline)) void a_hot(double seconds)
{
	double end = now() + seconds;

	while (now() < end)
		for (int i = 0; i < 100000; i++)
			sink += i;
}
