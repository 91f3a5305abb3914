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

#ifdef SWAP_PAD
/* Built with -DSWAP_PAD, the library has five pages more before its code (a section the linker puts
 * in the first, read-only segment), so the loader places it five pages lower and its code lands at
 * the same addresses as libswap_a.so's, b_hot where a_pad is, with other page counts: kernels
 * before 6.4 tell a change of mappings by those. */
__attribute__((section(".note.swap_pad"), used, aligned(4096))) static const char swap_pad[16384] = {1};
#endif
